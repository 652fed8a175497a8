//! The service's request frames (crates/serve/src/protocol.rs), as the broker and a worker
//! meet them: any bytes are decoded without a panic; a frame that decodes re-encodes to the
//! same bytes and agrees with the broker's peeks; its queries go on to what a worker does
//! with them (raw values encoded, encoded rows checked against the width) on the shipped
//! example's rule set, and every CPU matcher gives the same answers; an encoded one (32- or
//! 16-bit codes) reads in place (`encoded_view`, what an executor does) to the same codes.
//! Replies and dictionary replies are decoded too (the client takes them from the network).
#![no_main]

use libfuzzer_sys::fuzz_target;
use offload_rules::{Engine, MatcherKind, PackedStrings, RawColumn};
use offload_serve::protocol::{self, Payload};
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The example rule set (data/examples/mct-mini) compiled for each matcher every machine has.
fn engines() -> &'static Vec<Engine> {
    static ENGINES: OnceLock<Vec<Engine>> = OnceLock::new();
    ENGINES.get_or_init(|| {
        let rules = offload_rules::parse(
            Path::new("ruletype.toml"),
            include_bytes!("../../data/examples/mct-mini/ruletype.toml").to_vec(),
            Path::new("rules.csv"),
            include_bytes!("../../data/examples/mct-mini/rules.csv").to_vec(),
        )
        .expect("the shipped example loads");
        let rules = Arc::new(rules);
        MatcherKind::ALL.iter().map(|&k| Engine::compile(rules.clone(), k).expect("a CPU matcher builds")).collect()
    })
}

/// A worker's step after decoding: the request's rows as codes, or None where it would answer
/// BadRequest.
fn codes_of(engine: &Engine, payload: &Payload) -> Option<Vec<u32>> {
    let enc = &engine.encoder;
    match payload {
        Payload::Raw(cols) => {
            let offsets: Vec<Vec<i64>> =
                cols.iter().map(|c| c.offsets.iter().map(|&o| i64::from(o)).collect()).collect();
            let raw: Vec<RawColumn> = cols
                .iter()
                .zip(&offsets)
                .map(|(c, o)| PackedStrings::new(&c.data, o).map(RawColumn::Packed))
                .collect::<Result<_, _>>()
                .ok()?;
            enc.encode_columns(&raw).ok()
        }
        Payload::Encoded { width, codes, .. } => (*width as usize == enc.width()).then(|| codes.clone()),
        Payload::Encoded16 { width, codes, .. } => {
            (*width as usize == enc.width()).then(|| codes.iter().map(|&c| u32::from(c)).collect())
        }
    }
}

/// What an executor reads in place (`encoded_view`) is what the decoder reads: the same codes,
/// accepted exactly when the decoder accepts an encoded request.
fn check_view(frame: &[u8], decoded: Option<&protocol::Request>) {
    match (protocol::encoded_view(frame), decoded) {
        (Ok(Some(view)), Some(req)) => {
            let mut codes = Vec::new();
            view.append_codes(&mut codes);
            let want: Vec<u32> = match &req.payload {
                Payload::Encoded { codes, .. } => codes.clone(),
                Payload::Encoded16 { codes, .. } => codes.iter().map(|&c| u32::from(c)).collect(),
                Payload::Raw(_) => panic!("the in-place reader took a raw request"),
            };
            assert_eq!(codes, want, "the in-place reader's codes differ from the decoder's");
            assert_eq!(view.header.request_id, req.request_id);
        }
        (Ok(Some(_)), None) => panic!("the in-place reader accepted a frame the decoder refuses"),
        (Ok(None), Some(req)) => assert!(matches!(req.payload, Payload::Raw(_)), "an encoded request read as raw"),
        (Err(_), Some(req)) => assert!(
            matches!(req.payload, Payload::Raw(_)),
            "the in-place reader refused an encoded request the decoder accepts"
        ),
        (Ok(None) | Err(_), None) => {}
    }
}

fuzz_target!(|frame: &[u8]| {
    let peeked = (protocol::peek_request_id(frame), protocol::peek_deadline_us(frame), protocol::peek_n_queries(frame));
    let decoded = protocol::decode_request(frame);
    check_view(frame, decoded.as_ref().ok());
    match decoded {
        Ok(req) => {
            assert_eq!(protocol::encode_request(&req), frame, "a decoded request re-encodes to other bytes");
            assert_eq!(peeked, (req.request_id, req.deadline_us, req.n_queries), "the peeks disagree with the decoder");
            let engines = engines();
            if let Some(codes) = codes_of(&engines[0], &req.payload) {
                let answers: Vec<Vec<u32>> = engines.iter().map(|e| e.match_encoded(&codes, 1)).collect();
                for (e, a) in engines.iter().zip(&answers).skip(1) {
                    assert_eq!(a, &answers[0], "{} disagrees with {}", e.matcher.name(), engines[0].matcher.name());
                }
            }
        }
        Err(e) => drop(e.to_string()),
    }
    if let Ok(reply) = protocol::decode_reply(frame) {
        assert_eq!(protocol::encode_reply(&reply), frame, "a decoded reply re-encodes to other bytes");
    }
    if let Ok(reply) = protocol::decode_dictionary_reply(frame) {
        assert_eq!(protocol::encode_dictionary_reply(&reply), frame, "a dictionary reply re-encodes to other bytes");
    }
});
