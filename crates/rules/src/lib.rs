//! offload-rules: the business-rule engine of offload.
//!
//! Data flows one way: raw files → validated [`RuleSet`] ([`erbium`] or [`native`] loader) →
//! [`Encoder`] (dictionaries and range boundaries) + [`EncodedRules`] → a compiled
//! [`Matcher`] → batches of encoded queries in, winning rule indices out. An encoder's
//! [`EncoderDictionary`] lets a client encode queries without the rules.

pub mod csv;
pub mod dictionary;
pub mod encode;
pub mod erbium;
pub mod error;
pub mod eval;
pub mod explain;
pub mod matcher;
pub mod model;
pub mod native;
pub mod phf;
pub mod queries;
pub mod value;

pub use dictionary::{DictionaryCriterion, EncoderDictionary};
pub use encode::{EncodedRules, Encoder, PackedStrings, RawColumn, StringColumn};
pub use error::{ErrorKind, LoadError, Location};
pub use matcher::{match_parallel, match_staged, DeviceStages, Matcher, MatcherKind, NO_MATCH};
pub use model::{Criterion, CriterionKind, RuleSet, RuleType};

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Loads a rule set, choosing the loader by the rule-type file's extension: `.xml` is ERBIUM's
/// format, `.toml` the native one.
pub fn load(rule_type: &Path, rules: &Path) -> Result<RuleSet, LoadError> {
    match RuleTypeFormat::of(rule_type)? {
        RuleTypeFormat::Erbium => erbium::load(rule_type, rules),
        RuleTypeFormat::Native => native::load(rule_type, rules),
    }
}

/// Parses a rule set held in memory (one sent to the service, say), exactly as [`load`] would
/// the same bytes read from files: `rule_type_name` and `rules_name` stand for the files in
/// error locations, and the rule type's extension picks the format.
pub fn parse(
    rule_type_name: &Path,
    rule_type: Vec<u8>,
    rules_name: &Path,
    rules: Vec<u8>,
) -> Result<RuleSet, LoadError> {
    let format = RuleTypeFormat::of(rule_type_name)?;
    let rt = match format {
        RuleTypeFormat::Erbium => {
            erbium::parse_rule_type(rule_type_name, &erbium::xml_text(rule_type_name, rule_type)?)?
        }
        RuleTypeFormat::Native => {
            native::parse_rule_type(rule_type_name, &error::text_from_bytes(rule_type_name, rule_type)?)?
        }
    };
    let text = error::text_from_bytes(rules_name, rules)?;
    match format {
        RuleTypeFormat::Erbium => erbium::parse_rules(&rt, rules_name, &text),
        RuleTypeFormat::Native => native::parse_rules(&rt, rules_name, &text),
    }
}

/// The two rule-type formats, told apart by the file name's extension.
enum RuleTypeFormat {
    Erbium,
    Native,
}

impl RuleTypeFormat {
    fn of(rule_type: &Path) -> Result<RuleTypeFormat, LoadError> {
        match rule_type.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase()).as_deref() {
            Some("xml") => Ok(RuleTypeFormat::Erbium),
            Some("toml") => Ok(RuleTypeFormat::Native),
            _ => Err(LoadError::new(
                ErrorKind::BadRuleType,
                Location::file(rule_type),
                "cannot tell the rule-type format from the file name",
            )
            .expected("a .xml (ERBIUM) or .toml (native) rule-type file")),
        }
    }
}

/// A rule set compiled for one matcher: the encoder for raw queries plus the matcher.
pub struct Engine {
    pub encoder: Encoder,
    pub encoded: EncodedRules,
    pub matcher: Box<dyn Matcher>,
    pub compile_time: Duration,
}

impl Engine {
    /// Compiles `rules` for a matcher. Fails only where the matcher cannot run here (`gpu`
    /// without a device), saying why.
    pub fn compile(rules: Arc<RuleSet>, kind: MatcherKind) -> Result<Engine, String> {
        let t = Instant::now();
        let encoder = Encoder::new(rules);
        let encoded = encoder.encode_rules();
        let cards: Vec<usize> = (0..encoded.n_criteria).map(|c| encoder.cardinality(c)).collect();
        let matcher = matcher::build(kind, &encoded, &cards)?;
        Ok(Engine { encoder, encoded, matcher, compile_time: t.elapsed() })
    }

    pub fn rules(&self) -> &RuleSet {
        self.encoder.rules()
    }

    /// Matches encoded queries (row-major, `encoder.width()` codes per query).
    pub fn match_encoded(&self, queries: &[u32], threads: usize) -> Vec<u32> {
        let mut out = vec![NO_MATCH; queries.len() / self.encoder.width()];
        match_parallel(&*self.matcher, queries, &mut out, threads);
        out
    }
}
