"""Who may publish a topic: the rule, applied to what the ROS graph shows (issue 16).

A driver obeys whatever arrives on its command topic, and the supervisor believes whatever
arrives on `joint_states`. DDS lets any process on the domain publish both. So each checks
the publishers of the topics that move the robot or describe it, against a rule:

- `allowed` names the nodes that may publish, as fully qualified names (`/ns/node`) or as
  names relative to the checking node's namespace (`node`); every other publishing node is a
  rogue.
- `allowed` empty means one node, whichever it is: a second publishing node makes both
  suspect (the checker cannot tell which one is the real driver, so it names both).

A second process under an allowed node's name is not told apart: the graph keeps a killed
process's endpoints for its DDS lease (20 s by default), so a driver or a supervisor that
restarts after a crash has a dead twin of the same name for that long, and it must not be
refused. Only DDS security (SROS2, docs/security.md) tells them apart.

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

    def __init__(self, topic, allowed, own_fqn, namespace='/'):
        self.topic = topic
        self.allowed = {qualify(str(n), namespace) for n in allowed if str(n).strip()}
        self.own = own_fqn

    def describe(self):
        return ', '.join(sorted(self.allowed)) if self.allowed else ANY_ONE

    def review(self, endpoints):
        """Return (gids of the publishers obeyed, rogue node names, why) for `endpoints`.

        `endpoints`: iterable of (node fqn, gid bytes). The gids are those of the allowed
        publishers; none at all while the rule is broken in a way that leaves no node to
        trust (two nodes under `any one node`).
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
        trusted = [n for n in by_node if n not in rogues]
        gids = {g for n in trusted for g in by_node[n]}
        return gids, sorted(set(rogues)), '; '.join(why)
