use super::*;

fn fp(byte: u8) -> Fingerprint {
    Fingerprint::from_bytes([byte; 32])
}

struct Owned {
    toolchain: String,
    fingerprint: Fingerprint,
    target: Target,
    source: Vec<u8>,
    options: Vec<String>,
    headers: Vec<(String, Vec<u8>)>,
    entries: Vec<String>,
}

impl Owned {
    fn base() -> Self {
        Owned {
            toolchain: "nvrtc".into(),
            fingerprint: fp(7),
            target: "sm_90".parse().unwrap(),
            source: b"#include \"a.h\"\nextern \"C\" __global__ void k() {}".to_vec(),
            options: vec!["--use_fast_math".into(), "-DN=4".into()],
            headers: vec![("a.h".into(), b"#define X 1".to_vec()), ("b.h".into(), b"#define Y 2".to_vec())],
            entries: vec!["k".into()],
        }
    }

    fn key(&self) -> CacheKey {
        let headers: Vec<(&str, &[u8])> = self.headers.iter().map(|(n, c)| (n.as_str(), c.as_slice())).collect();
        KeyInputs {
            toolchain: &self.toolchain,
            fingerprint: &self.fingerprint,
            target: &self.target,
            source: &self.source,
            options: &self.options,
            headers: &headers,
            entries: &self.entries,
        }
        .derive()
    }
}

/// Each input, changed alone, changes the key.
#[test]
fn every_input_changes_the_key() {
    let base = Owned::base().key();
    type Change = Box<dyn Fn(&mut Owned)>;
    let changes: Vec<(&str, Change)> = vec![
        ("toolchain", Box::new(|o| o.toolchain = "ptxas".into())),
        ("fingerprint", Box::new(|o| o.fingerprint = fp(8))),
        ("target", Box::new(|o| o.target = "sm_80".parse().unwrap())),
        ("target suffix", Box::new(|o| o.target = "sm_90a".parse().unwrap())),
        ("source", Box::new(|o| o.source.push(b' '))),
        ("first option", Box::new(|o| o.options[0] = "--fmad=false".into())),
        ("second option", Box::new(|o| o.options[1] = "-DN=8".into())),
        ("option order", Box::new(|o| o.options.reverse())),
        ("option added", Box::new(|o| o.options.push("-lineinfo".into()))),
        ("header name", Box::new(|o| o.headers[0].0 = "c.h".into())),
        ("header content", Box::new(|o| o.headers[1].1.push(b'\n'))),
        ("header added", Box::new(|o| o.headers.push(("z.h".into(), Vec::new())))),
        ("entry", Box::new(|o| o.entries[0] = "k2".into())),
        ("entry added", Box::new(|o| o.entries.push("saxpy<float>".into()))),
    ];
    let mut seen = std::collections::HashSet::from([base]);
    for (what, change) in changes {
        let mut o = Owned::base();
        change(&mut o);
        let key = o.key();
        assert_ne!(key, base, "changing the {what} left the key unchanged");
        assert!(seen.insert(key), "changing the {what} collided with another change");
    }
}

/// Moving bytes between adjacent fields changes the key: the length prefixes make it injective.
#[test]
fn field_boundaries_are_part_of_the_key() {
    let mut a = Owned::base();
    a.options = vec!["-DA".into(), "B".into()];
    let mut b = Owned::base();
    b.options = vec!["-D".into(), "AB".into()];
    assert_ne!(a.key(), b.key());
    let mut c = Owned::base();
    c.headers = vec![("a.h".into(), b"xy".to_vec())];
    let mut d = Owned::base();
    d.headers = vec![("a.hx".into(), b"y".to_vec())];
    assert_ne!(c.key(), d.key());
}

/// Headers are a set by name: listing them in another order gives the same key.
#[test]
fn header_order_does_not_matter() {
    let mut o = Owned::base();
    let before = o.key();
    o.headers.reverse();
    assert_eq!(o.key(), before);
}

#[test]
fn keys_parse_only_as_lowercase_hex() {
    let key = Owned::base().key();
    assert_eq!(key.to_hex().parse::<CacheKey>().unwrap(), key);
    assert!(key.to_hex().to_uppercase().parse::<CacheKey>().is_err());
    assert!("../../etc/passwd".parse::<CacheKey>().is_err());
    assert!(key.to_hex()[..63].parse::<CacheKey>().is_err());
}

/// The same inputs give the same key in another process: the test binary re-runs itself.
#[test]
fn same_inputs_in_two_processes_give_same_key() {
    const CHILD: &str = "KILN_KEY_TEST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        println!("KEY={}", Owned::base().key());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", "key::tests::same_inputs_in_two_processes_give_same_key", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let child_key = stdout.lines().find_map(|l| l.strip_prefix("KEY=")).expect("child printed a key");
    assert_eq!(child_key, Owned::base().key().to_hex());
}

/// The shared test vectors in proto/testdata, which the Python tests check too.
#[test]
fn test_vectors_match() {
    let text = include_str!("../../testdata/key-vectors.json");
    let doc: serde_json::Value = serde_json::from_str(text).unwrap();
    let mut checked = 0;
    for v in doc["kernel_keys"].as_array().unwrap() {
        let s = |f: &str| v[f].as_str().unwrap().to_string();
        let list = |f: &str| -> Vec<String> {
            v[f].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
        };
        let o = Owned {
            toolchain: s("toolchain"),
            fingerprint: s("fingerprint").parse().unwrap(),
            target: s("target").parse().unwrap(),
            source: s("source").into_bytes(),
            options: list("options"),
            headers: v["headers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| (h[0].as_str().unwrap().into(), h[1].as_str().unwrap().as_bytes().to_vec()))
                .collect(),
            entries: list("entries"),
        };
        assert_eq!(o.key().to_hex(), s("key"), "vector {checked}");
        checked += 1;
    }
    for v in doc["graph_keys"].as_array().unwrap() {
        let target: Target = v["target"].as_str().unwrap().parse().unwrap();
        let kernels: Vec<(String, CacheKey)> = v["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| (k[0].as_str().unwrap().into(), k[1].as_str().unwrap().parse().unwrap()))
            .collect();
        let key = graph_key(&target, kernels.iter().map(|(id, k)| (id.as_str(), k)));
        assert_eq!(key.to_hex(), v["key"].as_str().unwrap());
        checked += 1;
    }
    for v in doc["blob_keys"].as_array().unwrap() {
        let key = blob_key(
            v["namespace"].as_str().unwrap(),
            v["tool_version"].as_str().unwrap(),
            v["caller_key"].as_str().unwrap().as_bytes(),
        );
        assert_eq!(key.to_hex(), v["key"].as_str().unwrap());
        checked += 1;
    }
    assert!(checked >= 6, "too few vectors: {checked}");
}

#[test]
fn snapshot_keys_ignore_part_order_and_separate_every_field() {
    let a = snapshot_key("job", [("torch", "2.11.0"), ("host.target", "sm_90")]);
    assert_eq!(a, snapshot_key("job", [("host.target", "sm_90"), ("torch", "2.11.0")]));
    assert_ne!(a, snapshot_key("job", [("torch", "2.11.0"), ("host.target", "sm_80")]), "another GPU");
    assert_ne!(a, snapshot_key("job2", [("torch", "2.11.0"), ("host.target", "sm_90")]), "another job");
    // Length prefixes: moving bytes between a name and its value changes the key.
    assert_ne!(snapshot_key("j", [("ab", "c")]), snapshot_key("j", [("a", "bc")]));
    assert_ne!(snapshot_file_key(&[1; 32]), snapshot_file_key(&[2; 32]));
    assert_ne!(snapshot_index_key(None), snapshot_index_key(Some("")), "the job list is not a job's list");
}
