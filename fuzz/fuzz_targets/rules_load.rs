//! The rule-file loaders (crates/rules: the strict CSV reader, the native TOML rule type and
//! rules CSV, ERBIUM's XML rule type and rules CSV), through `offload_rules::parse`, the
//! in-memory twin of `load`. Input: one byte choosing the format (even: native `.toml`, odd:
//! ERBIUM `.xml`), the rule-type file, a NUL byte, the rules CSV. Any bytes give a rule set or
//! a located error, never a panic; a rule set that loads also compiles (the linear matcher)
//! and matches a query of unknown values without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use offload_rules::{Engine, MatcherKind};
use std::path::Path;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Some((&format, rest)) = data.split_first() else { return };
    let (rule_type, rules) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let rule_type_name = if format & 1 == 0 { "ruletype.toml" } else { "ruletype.xml" };
    match offload_rules::parse(Path::new(rule_type_name), rule_type.to_vec(), Path::new("rules.csv"), rules.to_vec()) {
        Ok(rules) => {
            assert_eq!(rules.ids.len(), rules.contents.len());
            let engine = Engine::compile(Arc::new(rules), MatcherKind::Linear).expect("the linear matcher builds");
            let unknown = vec![0u32; engine.encoder.width()];
            let _ = engine.match_encoded(&unknown, 1);
        }
        Err(e) => {
            let _ = (e.to_string(), e.without_content());
        }
    }
});
