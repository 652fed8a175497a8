//! The native-format example shipped in data/examples/mct-mini answers as its expected.csv says,
//! with every matcher.

use offload_rules::{load, queries, Engine, MatcherKind};
use std::path::PathBuf;
use std::sync::Arc;

#[test]
fn mct_mini_example_answers_as_documented() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/examples/mct-mini");
    let rs = Arc::new(load(&dir.join("ruletype.toml"), &dir.join("rules.csv")).unwrap());
    let q = queries::load_queries(&rs.rule_type, &dir.join("queries.csv")).unwrap();
    let expected = std::fs::read_to_string(dir.join("expected.csv")).unwrap();
    for kind in MatcherKind::ALL {
        let eng = Engine::compile(rs.clone(), kind).unwrap();
        let codes = q.encode(&eng.encoder, &dir.join("queries.csv")).unwrap();
        let answers = eng.match_encoded(&codes, 1);
        let out = std::env::temp_dir().join(format!("offload-mct-mini-{}.csv", kind.as_str()));
        queries::write_answers(&out, &q.ids, &answers, &rs).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), expected, "matcher {}", kind.as_str());
    }
}
