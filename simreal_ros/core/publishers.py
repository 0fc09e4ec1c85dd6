"""Who may publish a topic: the rule, applied to what the ROS graph shows (issue 16).

A driver obeys whatever arrives on its command topic, and the supervisor believes whatever
arrives on `joint_states`. DDS lets any process on the domain publish both. So each checks
the publishers of the topics that move the robot or describe it, against a rule:

- `allowed` names the nodes that may publish, as fully qualified names (`/ns/node`) or as
  names relative to the checking node's namespace (`node`); every other publishing node is a
  rogue.
- `allowed` empty means one node, whichever it is: a second publishing node makes both
  suspect (the checker cannot tell which one is the real driver, so it names both).
- A node name that appears with more endpoints than `max_endpoints_per_node` (default 1: a
  driver or a supervisor has one publisher per topic) is a rogue too: a second process that
  took the allowed node's name.

The checking node's own endpoints are never rogues (the supervisor publishes
`hardware/command` itself). Nothing here imports rclpy: endpoints are (node fqn, gid bytes).
"""

ANY_ONE = 'any one node'


def qualify(name, namespace):
    """Return the fully qualified node name of `name` in `namespace`."""
    if name.startswith('/'):
        return name
    ns = namespace.rstrip('/')
    return f'{ns}/{name}'


def node_fqn(name, namespace):
    """The fully qualified name of a node from the graph's (name, namespace)."""
    return qualify(name, namespace or '/')


class PublisherRule:
    """The rule for one topic, and the verdict on the endpoints seen (see module doc)."""

    def __init__(self, topic, allowed, own_fqn, namespace='/', max_endpoints_per_node=1):
        self.topic = topic
        self.allowed = {qualify(str(n), namespace) for n in allowed if str(n).strip()}
        self.own = own_fqn
        self.max_endpoints = int(max_endpoints_per_node)
        if self.max_endpoints < 1:
            raise ValueError(f'max_endpoints_per_node {max_endpoints_per_node} < 1')

    def describe(self):
        return ', '.join(sorted(self.allowed)) if self.allowed else ANY_ONE

    def review(self, endpoints):
        """Return (gids of the publishers obeyed, rogue node names, why) for `endpoints`.

        `endpoints`: iterable of (node fqn, gid bytes). The gids are those of the allowed
        publishers; none at all while the rule is broken in a way that leaves no node to
        trust (two nodes under `any one node`, or an allowed name used twice).
        """
        by_node = {}
        for fqn, gid in endpoints:
            if fqn == self.own:
                continue
            by_node.setdefault(fqn, []).append(bytes(gid))
        rogues, why = [], []
        if self.allowed:
            others = sorted(n for n in by_node if n not in self.allowed)
            if others:
                rogues += others
                why.append(f'{", ".join(others)} publish {self.topic}, which only '
                           f'{self.describe()} may')
        elif len(by_node) > 1:
            rogues += sorted(by_node)
            why.append(f'{len(by_node)} nodes publish {self.topic} ({", ".join(sorted(by_node))})'
                       ', where one driver may')
        doubled = sorted(n for n, g in by_node.items()
                         if len(g) > self.max_endpoints and n not in rogues)
        if doubled:
            rogues += doubled
            why.append(f'{", ".join(doubled)} publish {self.topic} from '
                       f'{max(len(by_node[n]) for n in doubled)} endpoints: a second process '
                       'with the same node name')
        trusted = [n for n in by_node if n not in rogues]
        gids = {g for n in trusted for g in by_node[n]}
        return gids, sorted(set(rogues)), '; '.join(why)
