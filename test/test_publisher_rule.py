"""core/publishers.py: who may publish a topic, judged from the graph's endpoints."""
from simreal_ros.core.publishers import PublisherRule, node_fqn, qualify


def ep(name, n=1):
    return (name, bytes([n]) * 16)


def test_names_are_qualified_in_the_checking_nodes_namespace():
    assert qualify('safety_supervisor', '/left') == '/left/safety_supervisor'
    assert qualify('/other/x', '/left') == '/other/x'
    assert qualify('x', '/') == '/x'
    assert node_fqn('x', '') == '/x'


def test_only_the_allowed_node_may_publish_and_the_other_is_named():
    rule = PublisherRule('hardware/command', ['safety_supervisor'], '/sim_robot')
    gids, rogues, why = rule.review([ep('/safety_supervisor', 1), ep('/rogue', 2)])
    assert rogues == ['/rogue'] and '/rogue' in why
    assert gids == {bytes([1]) * 16}
    assert rule.review([ep('/safety_supervisor', 1)])[1] == []


def test_the_checking_nodes_own_endpoints_never_count():
    rule = PublisherRule('hardware/command', ['/safety_supervisor'], '/safety_supervisor')
    assert rule.review([ep('/safety_supervisor', 1)])[1] == []
    assert rule.review([ep('/safety_supervisor', 1), ep('/x', 2)])[1] == ['/x']


def test_any_one_node_but_a_second_makes_both_suspect():
    rule = PublisherRule('joint_states', [], '/safety_supervisor')
    assert rule.review([ep('/sim_robot', 1)])[1] == []
    gids, rogues, why = rule.review([ep('/sim_robot', 1), ep('/spoof', 2)])
    assert rogues == ['/sim_robot', '/spoof'] and gids == set()
    assert '2 nodes publish joint_states' in why


def test_a_restarted_node_with_a_dead_twin_of_its_name_is_not_refused():
    """The graph keeps a killed process's endpoints for its DDS lease (20 s)."""
    rule = PublisherRule('hardware/command', ['safety_supervisor'], '/sim_robot')
    gids, rogues, _ = rule.review([ep('/safety_supervisor', 1), ep('/safety_supervisor', 2)])
    assert rogues == [] and len(gids) == 2
    rule = PublisherRule('joint_states', [], '/safety_supervisor')
    assert rule.review([ep('/sim_robot', 1), ep('/sim_robot', 2)])[1] == []
