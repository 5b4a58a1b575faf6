use super::*;

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("task-{i}")).collect()
}

#[test]
fn empty_ring_owns_nothing() {
    let ring = HostRing::from_hosts(Vec::<&str>::new());
    assert_eq!(ring.owner("x"), None);
    assert!(!ring.is_owner("host-a", "x"));
    assert!(ring.assignments(["x"]).is_empty());
}

#[test]
fn one_host_owns_everything() {
    let ring = HostRing::from_hosts(["solo"]);
    assert!(names(100).iter().all(|n| ring.owner(n) == Some("solo")));
}

#[test]
fn incremental_ring_equals_rebuilt_ring() {
    let mut ring = HostRing::new(RingConfig::default()).expect("default config is valid");
    for host in ["c", "a", "b", "d"] {
        ring.add(host);
    }
    ring.remove("d");
    let rebuilt = HostRing::from_hosts(["a", "b", "c"]);
    assert_eq!(ring.point_count(), rebuilt.point_count());
    for name in &names(2_000) {
        assert_eq!(ring.owner(name), rebuilt.owner(name));
    }
}

#[test]
fn lowering_a_weight_restores_the_weight_one_ring() {
    let mut ring = HostRing::from_hosts(["a", "b"]);
    ring.add_weighted("a", 3).expect("valid weight");
    assert_eq!(ring.point_count(), 4 * 160);
    assert!(ring.add("a"));
    let plain = HostRing::from_hosts(["a", "b"]);
    assert_eq!(ring, plain);
    for name in &names(2_000) {
        assert_eq!(ring.owner(name), plain.owner(name));
    }
}

#[test]
fn invalid_weight_leaves_the_ring_unchanged() {
    let mut ring = HostRing::from_hosts(["a"]);
    let before = ring.clone();
    assert_eq!(
        ring.add_weighted("b", MAX_WEIGHT + 1),
        Err(RingError::Weight {
            host: "b".into(),
            weight: MAX_WEIGHT + 1,
            max: MAX_WEIGHT
        })
    );
    assert_eq!(ring, before);
}

#[test]
fn invalid_config_is_refused() {
    let config = RingConfig::default().with_virtual_nodes(crate::MAX_VIRTUAL_NODES + 1);
    assert!(matches!(
        HostRing::new(config),
        Err(RingError::VirtualNodes { .. })
    ));
    assert!(HostRing::with_hosts(config, ["a"]).is_err());
}

/// Pins the assignment so a change of hasher or point labels cannot slip through unnoticed:
/// every deployed version must agree on owners.
#[test]
fn assignment_is_stable_across_builds() {
    let ring = HostRing::from_hosts(["host-a", "host-b", "host-c"]);
    let owners: Vec<&str> = [
        "task-0", "task-1", "task-2", "task-3", "task-4", "task-5", "task-6", "task-7",
    ]
    .iter()
    .filter_map(|name| ring.owner(name))
    .collect();
    assert_eq!(owners, GOLDEN);
}

/// Computed independently (Python SipHash-2-4 over `host#i` labels, `bisect_left`, wrap).
const GOLDEN: [&str; 8] = [
    "host-c", "host-a", "host-c", "host-b", "host-b", "host-c", "host-c", "host-a",
];
