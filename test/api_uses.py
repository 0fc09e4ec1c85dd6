"""What the package uses of rclpy, launch and launch_ros, read from its source by AST (no import).

Shared by test/test_distro_compat.py (checks the uses against test/data/distro_api.json) and
scripts/distro_facts.py (writes that table from the upstream sources). Pure Python, no ROS.

A use is (module, dotted name, keyword arguments, file:line, guarded):
- `from rclpy.qos import QoSProfile` -> ('rclpy.qos', 'QoSProfile');
- `QoSProfile(depth=1)` -> ('rclpy.qos', 'QoSProfile', {'depth'});
- `ReliabilityPolicy.BEST_EFFORT` -> ('rclpy.qos', 'ReliabilityPolicy.BEST_EFFORT');
- `rclpy.init(args=...)` after `import rclpy` -> ('rclpy', 'init', {'args'});
- `self.create_timer(..., clock=c)` in a class derived from rclpy's Node, and `node.<m>(...)`
  / `self.node.<m>(...)` anywhere -> ('rclpy.node', 'Node.create_timer', {'clock'});
  `executor.spin_once(timeout_sec=0.1)` -> ('rclpy.executors',
  'SingleThreadedExecutor.spin_once', {'timeout_sec'}).
- `int(param.type_)` (a Parameter's type, in a file that imports rclpy) -> ('rclpy.parameter',
  'Parameter.Type', as_int=True); `int(X.Y)` of an rclpy name likewise: an enum taken as a
  number, which only an IntEnum allows.
`guarded` is set when the use sits inside a `try:` whose handlers catch ImportError,
AttributeError or TypeError: a fallback (allowed only when listed in the test's FALLBACKS).
"""
import ast
from dataclasses import dataclass, field
from pathlib import Path

ROOTS = ('rclpy', 'launch', 'launch_ros')
NODE_RECEIVERS = ('node', 'self.node', 'self._node', 'owner.node')
# Other receivers known by name: an executor is checked against SingleThreadedExecutor, the
# one every distro has (the EventsExecutor must take the same calls: it falls back to it).
RECEIVER_CLASSES = {'executor': ('rclpy.executors', 'SingleThreadedExecutor'),
                    'self.executor': ('rclpy.executors', 'SingleThreadedExecutor')}
GUARD_EXCEPTIONS = {'ImportError', 'ModuleNotFoundError', 'AttributeError', 'TypeError'}


@dataclass
class Use:
    module: str
    name: str
    kwargs: tuple = ()
    where: str = ''
    guarded: bool = False
    extra: dict = field(default_factory=dict)


def _dotted(node):
    """'a.b.c' for Name/Attribute chains, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return '.'.join(reversed(parts))
    return None


def _in_root(module):
    return module is not None and module.split('.')[0] in ROOTS


class _Scanner(ast.NodeVisitor):
    def __init__(self, path, rel):
        self.rel = rel
        self.uses = []
        self.aliases = {}      # local name -> (module, name or '') ; '' = the module itself
        self.guard = 0
        self.node_classes = set()
        self.class_stack = []
        self.path = path

    # -- helpers -------------------------------------------------------------------------
    def _add(self, module, name, node, kwargs=(), **extra):
        self.uses.append(Use(module, name, tuple(sorted(kwargs)), f'{self.rel}:{node.lineno}',
                             self.guard > 0, extra))

    def _resolve(self, dotted):
        """(module, name) for a dotted local reference to an rclpy/launch object, or None."""
        head, _, rest = dotted.partition('.')
        if head not in self.aliases:
            return None
        module, name = self.aliases[head]
        if name:
            return module, name + ('.' + rest if rest else '')
        # A module alias: walk `rest` as submodules as long as it is lower case (rclpy.qos.X).
        parts = rest.split('.') if rest else []
        while parts and parts[0].islower() and len(parts) > 1 and parts[0] != 'Node':
            module, parts = module + '.' + parts[0], parts[1:]
        return module, '.'.join(parts)

    def _catches_guard(self, handler):
        if handler.type is None:
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return any(_dotted(t) in GUARD_EXCEPTIONS for t in types)

    # -- visitors ------------------------------------------------------------------------
    def visit_Try(self, node):
        guarded = any(self._catches_guard(h) for h in node.handlers)
        self.guard += guarded
        for stmt in node.body:
            self.visit(stmt)
        self.guard -= guarded
        for part in node.handlers + node.orelse + node.finalbody:
            self.visit(part)

    visit_TryStar = visit_Try

    def visit_Import(self, node):
        for alias in node.names:
            if _in_root(alias.name):
                self._add(alias.name, '', node)
                local = alias.asname or alias.name.split('.')[0]
                self.aliases[local] = (alias.name if alias.asname else local, '')
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        if node.level == 0 and _in_root(node.module):
            for alias in node.names:
                self._add(node.module, alias.name, node)
                self.aliases[alias.asname or alias.name] = (node.module, alias.name)
        self.generic_visit(node)

    def visit_ClassDef(self, node):
        for base in node.bases:
            dotted = _dotted(base)
            resolved = self._resolve(dotted) if dotted else None
            if resolved in (('rclpy.node', 'Node'), ('rclpy', 'node.Node')):
                self.node_classes.add(node.name)
        own = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.class_stack.append((node.name, own))
        self.generic_visit(node)
        self.class_stack.pop()

    def _node_method(self, receiver, method):
        """True when `receiver.method(...)` is taken for a call on an rclpy Node."""
        if method.startswith('_'):
            return False    # the package's own helpers (rclpy's private API is not used)
        if receiver in NODE_RECEIVERS:
            return True
        if receiver == 'self' and self.class_stack:
            name, own = self.class_stack[-1]
            return name in self.node_classes and method not in own
        return False

    def _enum_as_int(self, node):
        """`int(x)` where x is an rclpy enum (member): recorded with as_int."""
        if not (isinstance(node.func, ast.Name) and node.func.id == 'int' and len(node.args) == 1
                and isinstance(node.args[0], ast.Attribute)):
            return
        arg = node.args[0]
        if arg.attr == 'type_' and any(m.split('.')[0] == 'rclpy'
                                       for m, _ in self.aliases.values()):
            self._add('rclpy.parameter', 'Parameter.Type', node, as_int=True)
            return
        dotted = _dotted(arg)
        resolved = self._resolve(dotted) if dotted else None
        if resolved is not None and resolved[1]:
            self._add(resolved[0], resolved[1], node, as_int=True)

    def visit_Call(self, node):
        self._enum_as_int(node)
        dotted = _dotted(node.func)
        kwargs = [k.arg for k in node.keywords if k.arg is not None]
        if dotted:
            resolved = self._resolve(dotted)
            receiver, _, method = dotted.rpartition('.')
            if resolved is not None and resolved[1]:
                self._add(resolved[0], resolved[1], node, kwargs, call=True,
                          positional=len(node.args))
                self._skip_attr = node.func
            elif method and self._node_method(receiver, method):
                self._add('rclpy.node', 'Node.' + method, node, kwargs, call=True,
                          positional=len(node.args), by_receiver_name=True)
            elif method and receiver in RECEIVER_CLASSES:
                module, cls = RECEIVER_CLASSES[receiver]
                self._add(module, f'{cls}.{method}', node, kwargs, call=True,
                          positional=len(node.args), by_receiver_name=True)
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if getattr(self, '_skip_attr', None) is node:
            self.generic_visit(node)
            return
        dotted = _dotted(node)
        if dotted:
            resolved = self._resolve(dotted)
            if resolved is not None and resolved[1] and '.' in resolved[1]:
                self._add(resolved[0], resolved[1], node)
                return      # the inner parts of this chain are the same use
        self.generic_visit(node)


def scan_file(path, rel):
    """Return the uses in one Python file."""
    tree = ast.parse(Path(path).read_text(), filename=str(path))
    scanner = _Scanner(path, rel)
    scanner.visit(tree)
    return scanner.uses


def package_files(repo):
    """The Python files that an installed simreal_ros runs: the package and launch files."""
    repo = Path(repo)
    files = sorted((repo / 'simreal_ros').rglob('*.py')) + sorted((repo / 'launch').glob('*.py'))
    return [f for f in files if '__pycache__' not in f.parts]


def scan_package(repo):
    """Return every use in the package, in file order."""
    repo = Path(repo)
    uses = []
    for path in package_files(repo):
        uses.extend(scan_file(path, str(path.relative_to(repo))))
    return uses
