//! Golden tests of ERBIUM's semantics as docs/rules.md states them, and one test per
//! validation error (kind, line and column).

use offload_rules::{erbium, native, Engine, ErrorKind, LoadError, MatcherKind, RawColumn, NO_MATCH};
use std::path::Path;
use std::sync::Arc;

const XML: &str = r#"<?xml version="1.0" encoding="ISO-8859-1"?>
<ruleTypeDefinition>
<code>MINI</code>
<subversion>1</subversion>
<description>mini MCT</description>
<criterionDefinition><code>CTN_TYPE</code><sequenceNumber>0</sequenceNumber>
<criterionTypeReference><id>273</id><fileName>a.xml</fileName></criterionTypeReference>
<isMandatory>true</isMandatory><weight>0</weight><guiProperties></guiProperties></criterionDefinition>
<criterionDefinition><code>MCT_PRD</code><sequenceNumber>1</sequenceNumber>
<criterionTypeReference><id>212</id><fileName>d.xml</fileName></criterionTypeReference>
<isMandatory>false</isMandatory><weight>1</weight><guiProperties></guiProperties><guiProperties></guiProperties></criterionDefinition>
<criterionDefinition><code>APT</code><sequenceNumber>2</sequenceNumber>
<criterionTypeReference><id>273</id><fileName>a.xml</fileName></criterionTypeReference>
<isMandatory>true</isMandatory><weight>0</weight><guiProperties></guiProperties></criterionDefinition>
<criterionDefinition><code>CRR</code><sequenceNumber>3</sequenceNumber>
<criterionTypeReference><id>60</id><fileName>a.xml</fileName></criterionTypeReference>
<isMandatory>false</isMandatory><weight>4</weight><guiProperties></guiProperties></criterionDefinition>
<criterionDefinition><code>FLT_RG</code><sequenceNumber>4</sequenceNumber>
<criterionTypeReference><id>412</id><fileName>i.xml</fileName></criterionTypeReference>
<isMandatory>false</isMandatory><weight>2</weight><guiProperties></guiProperties><guiProperties></guiProperties></criterionDefinition>
</ruleTypeDefinition>
"#;

const HEADER: &str =
    "RULE_ID,WEIGHT,STATUS,VICEVERSA,TAGS,CRITERIA,CTN_TYPE,MCT_PRD,APT,CRR,FLT_RG,CONTENT,Hour,INVALID,Minutes";

fn rule_type() -> offload_rules::RuleType {
    erbium::parse_rule_type(Path::new("mini.xml"), XML).unwrap()
}

fn rules(rows: &[&str]) -> Result<offload_rules::RuleSet, LoadError> {
    let text = format!("{HEADER}\n{}\n", rows.join("\n"));
    erbium::parse_rules(&rule_type(), Path::new("rules.csv"), &text)
}

/// Answers (RULE_ID or None, content) for queries given as CTN_TYPE, date, APT, CRR, flight.
fn answer(rows: &[&str], queries: &[[&str; 5]]) -> Vec<Option<(String, i64)>> {
    let rs = Arc::new(rules(rows).unwrap());
    let mut results: Vec<Vec<Option<(String, i64)>>> = Vec::new();
    for kind in MatcherKind::ALL {
        let eng = Engine::compile(rs.clone(), kind).unwrap();
        let cols: Vec<RawColumn> = (0..5).map(|c| RawColumn::Str(queries.iter().map(|q| q[c]).collect())).collect();
        let codes = eng.encoder.encode_columns(&cols).unwrap();
        let out = eng.match_encoded(&codes, 1);
        results.push(
            out.iter()
                .map(|&r| (r != NO_MATCH).then(|| (rs.ids[r as usize].clone(), rs.contents[r as usize])))
                .collect(),
        );
    }
    assert!(results.windows(2).all(|w| w[0] == w[1]), "matchers disagree: {results:?}");
    results.remove(0)
}

fn some(id: &str, content: i64) -> Option<(String, i64)> {
    Some((id.to_string(), content))
}

#[test]
fn content_is_hour_times_60_plus_minutes_or_999_when_invalid() {
    let rs =
        rules(&[r#""A",,,,,,"DD",,"ZRH",,,,"1","FALSE","30""#, r#""B",,,,,,"DI",,"ZRH",,,,"0","TRUE","0""#]).unwrap();
    assert_eq!(rs.contents, vec![90, 999]);
    assert_eq!(rs.ids, vec!["A", "B"]);
}

#[test]
fn highest_score_wins_and_ties_go_to_the_first_rule() {
    let rows = [
        r#""default",,,,,,"DD",,"ZRH",,,,"0","FALSE","25""#,
        r#""crr-1",,,,,,"DD",,"ZRH","LX",,,"0","FALSE","30""#,
        r#""crr-2",,,,,,"DD",,"ZRH","LX",,,"0","FALSE","35""#,
        r#""flt",,,,,,"DD",,"ZRH",,"0100/0199",,"0","FALSE","40""#,
    ];
    let got = answer(
        &rows,
        &[
            ["DD", "01JAN2020", "ZRH", "LX", "50"], // crr (4) beats default; tie crr-1/crr-2 -> crr-1
            ["DD", "01JAN2020", "ZRH", "LH", "150"], // only flt range (2) and default
            ["DD", "01JAN2020", "ZRH", "LX", "150"], // crr (4) beats flt (2)
            ["DD", "01JAN2020", "ZRH", "QQ", "99"], // unknown carrier: wildcard default
            ["DI", "01JAN2020", "ZRH", "LX", "150"], // mandatory CTN_TYPE differs: no match
            ["DD", "01JAN2020", "GVA", "LX", "150"], // unknown airport: no match
        ],
    );
    assert_eq!(got, vec![some("crr-1", 30), some("flt", 40), some("crr-1", 30), some("default", 25), None, None]);
}

#[test]
fn ranges_are_inclusive_at_both_bounds() {
    let rows = [
        r#""d",,,,,,"DD","01JAN2019-31DEC2019","ZRH",,,,"0","FALSE","45""#,
        r#""f",,,,,,"DD",,"ZRH",,"0100/0199",,"0","FALSE","50""#,
    ];
    let got = answer(
        &rows,
        &[
            ["DD", "01JAN2019", "ZRH", "X", "1"],
            ["DD", "31DEC2019", "ZRH", "X", "1"],
            ["DD", "31DEC2018", "ZRH", "X", "1"],
            ["DD", "01JAN2020", "ZRH", "X", "100"],
            ["DD", "01JAN2020", "ZRH", "X", "199"],
            ["DD", "01JAN2020", "ZRH", "X", "200"],
            ["DD", "2019-06-15", "ZRH", "X", "0099"],
        ],
    );
    assert_eq!(got, vec![some("d", 45), some("d", 45), None, some("f", 50), some("f", 50), None, some("d", 45)]);
}

#[test]
fn empty_rule_set_matches_nothing() {
    let rs = Arc::new(rules(&[]).unwrap());
    assert!(rs.is_empty());
    for kind in MatcherKind::ALL {
        let eng = Engine::compile(rs.clone(), kind).unwrap();
        let cols: Vec<RawColumn> =
            ["DD", "01JAN2020", "ZRH", "LX", "1"].iter().map(|v| RawColumn::Str(vec![*v])).collect();
        let codes = eng.encoder.encode_columns(&cols).unwrap();
        assert_eq!(eng.match_encoded(&codes, 1), vec![NO_MATCH]);
        assert!(eng.match_encoded(&[], 2).is_empty());
    }
}

#[test]
fn flight_numbers_are_not_truncated() {
    // ERBIUM's 13-bit codes wrap 8192 onto 0; we keep any size.
    let rows = [
        r#""big",,,,,,"DD",,"ZRH",,"8192/8192",,"0","FALSE","60""#,
        r#""huge",,,,,,"DD",,"ZRH",,"100000000000000000000/100000000000000000001",,"0","FALSE","70""#,
    ];
    let got = answer(
        &rows,
        &[
            ["DD", "01JAN2020", "ZRH", "X", "0"],
            ["DD", "01JAN2020", "ZRH", "X", "8192"],
            ["DD", "01JAN2020", "ZRH", "X", "100000000000000000001"],
        ],
    );
    assert_eq!(got, vec![None, some("big", 60), some("huge", 70)]);
}

fn err_of(rows: &[&str]) -> LoadError {
    rules(rows).unwrap_err()
}

fn assert_err(e: LoadError, kind: ErrorKind, line: u64, column: u64) {
    assert_eq!((e.kind, e.location.line, e.location.column), (kind, Some(line), Some(column)), "{e}");
    assert!(e.expected.is_some(), "error without 'expected': {e}");
    let text = e.to_string();
    assert!(text.contains(&format!(":{line}:{column}")), "{text}");
}

#[test]
fn error_wrong_column_count() {
    assert_err(err_of(&[r#""a",,,,,,"DD",,"ZRH",,,"0","FALSE","30""#]), ErrorKind::WrongColumnCount, 2, 36);
}

#[test]
fn error_unknown_criterion() {
    let text = HEADER.replace("CRR", "CARRIER") + "\n";
    let e = erbium::parse_rules(&rule_type(), Path::new("r.csv"), &text).unwrap_err();
    assert_err(e, ErrorKind::UnknownCriterion, 1, 68);
}

#[test]
fn error_wildcard_in_mandatory_criterion() {
    assert_err(err_of(&[r#""a",,,,,,"DD",,,,,,"0","FALSE","30""#]), ErrorKind::MandatoryWildcard, 2, 16);
}

#[test]
fn error_malformed_range() {
    assert_err(err_of(&[r#""a",,,,,,"DD",,"ZRH",,"0100",,"0","FALSE","30""#]), ErrorKind::MalformedRange, 2, 23);
}

#[test]
fn error_reversed_range() {
    assert_err(err_of(&[r#""a",,,,,,"DD",,"ZRH",,"0200/0100",,"0","FALSE","30""#]), ErrorKind::ReversedRange, 2, 23);
}

#[test]
fn error_impossible_date() {
    assert_err(
        err_of(&[r#""a",,,,,,"DD","01FEB2019-30FEB2019","ZRH",,,,"0","FALSE","30""#]),
        ErrorKind::ImpossibleDate,
        2,
        15,
    );
}

#[test]
fn error_non_numeric_integer() {
    assert_err(err_of(&[r#""a",,,,,,"DD",,"ZRH",,"01A0/0199",,"0","FALSE","30""#]), ErrorKind::NotAnInteger, 2, 23);
}

#[test]
fn error_integer_too_large() {
    let big = "9".repeat(50);
    let row = format!(r#""a",,,,,,"DD",,"ZRH",,"1/{big}",,"0","FALSE","30""#);
    assert_err(err_of(&[&row]), ErrorKind::IntegerTooLarge, 2, 23);
}

#[test]
fn error_duplicate_rule_id() {
    let e = err_of(&[r#""a",,,,,,"DD",,"ZRH",,,,"0","FALSE","30""#, r#""a",,,,,,"DI",,"ZRH",,,,"0","FALSE","30""#]);
    assert_err(e.clone(), ErrorKind::DuplicateRuleId, 3, 1);
    assert!(e.message.contains("line 2"), "{e}");
}

#[test]
fn error_broken_quoting() {
    assert_err(err_of(&[r#""a",,,,,,"DD",,"ZRH",,,,"0","FALSE","30"#]), ErrorKind::BrokenQuoting, 2, 37);
}

#[test]
fn error_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("empty.csv");
    std::fs::write(&p, "").unwrap();
    let e = erbium::load_rules(&rule_type(), &p).unwrap_err();
    assert_eq!(e.kind, ErrorKind::EmptyFile);
}

#[test]
fn error_not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("latin1.csv");
    let mut bytes = format!("{HEADER}\n\"a\",,,,,,\"DD\",,\"Z").into_bytes();
    bytes.push(0xDC); // 'Ü' in Latin-1
    bytes.extend_from_slice(b"RH\",,,,\"0\",\"FALSE\",\"30\"\n");
    std::fs::write(&p, bytes).unwrap();
    let e = erbium::load_rules(&rule_type(), &p).unwrap_err();
    assert_err(e, ErrorKind::NotUtf8, 2, 18);
}

#[test]
fn error_bad_content() {
    assert_err(err_of(&[r#""a",,,,,,"DD",,"ZRH",,,,"x","FALSE","30""#]), ErrorKind::BadContent, 2, 25);
}

#[test]
fn error_bad_xml_is_located() {
    let e = erbium::parse_rule_type(Path::new("t.xml"), "<ruleTypeDefinition>\n<code>X</cod>\n").unwrap_err();
    assert_eq!((e.kind, e.location.line), (ErrorKind::Xml, Some(2)));
    let e = erbium::parse_rule_type(Path::new("t.xml"), &XML.replace("<weight>4</weight>", "<weight>-4</weight>"))
        .unwrap_err();
    assert_eq!((e.kind, e.location.line), (ErrorKind::BadRuleType, Some(17)));
}

#[test]
fn native_and_erbium_formats_load_the_same_rule_set() {
    let toml = r#"
code = "MINI"
[[criterion]]
code = "CTN_TYPE"
kind = "equ"
mandatory = true
weight = 0
[[criterion]]
code = "MCT_PRD"
kind = "date_range"
weight = 1
[[criterion]]
code = "APT"
kind = "equ"
mandatory = true
weight = 0
[[criterion]]
code = "CRR"
kind = "equ"
weight = 4
[[criterion]]
code = "FLT_RG"
kind = "int_range"
weight = 2
"#;
    let rt = native::parse_rule_type(Path::new("t.toml"), toml).unwrap();
    assert_eq!(rt.criteria, rule_type().criteria);
    let csv = "RULE_ID,CTN_TYPE,APT,CRR,MCT_PRD,FLT_RG,CONTENT\n\
               a,DD,ZRH,*,2019-01-01..2019-12-31,,45\n\
               b,DD,ZRH,LX,,100..199,50\n";
    let n = native::parse_rules(&rt, Path::new("r.csv"), csv).unwrap();
    let e = rules(&[
        r#""a",,,,,,"DD","01JAN2019-31DEC2019","ZRH",,,,"0","FALSE","45""#,
        r#""b",,,,,,"DD",,"ZRH","LX","0100/0199",,"0","FALSE","50""#,
    ])
    .unwrap();
    assert_eq!(n.ids, e.ids);
    assert_eq!(n.contents, e.contents);
    for r in 0..2 {
        for c in 0..5 {
            assert_eq!(n.cell_text(r, c), e.cell_text(r, c));
        }
    }
    let e = native::parse_rules(
        &rt,
        Path::new("r.csv"),
        "RULE_ID,CTN_TYPE,APT,CRR,MCT_PRD,FLT_RG,CONTENT\na,DD,ZRH,,,..x,1\n",
    )
    .unwrap_err();
    assert_eq!((e.kind, e.location.line, e.location.column), (ErrorKind::NotAnInteger, Some(2), Some(12)));
}

#[test]
fn open_ranges_print_as_open() {
    let toml = "code = \"T\"\n[[criterion]]\ncode = \"D\"\nkind = \"date_range\"\nweight = 1\n\
                [[criterion]]\ncode = \"N\"\nkind = \"int_range\"\nweight = 1\n";
    let rt = native::parse_rule_type(Path::new("t.toml"), toml).unwrap();
    let rs =
        native::parse_rules(&rt, Path::new("r.csv"), "RULE_ID,D,N,CONTENT\na,..2019-12-31,100..,1\nb,2019-01-01,7,2\n")
            .unwrap();
    assert_eq!((rs.cell_text(0, 0), rs.cell_text(0, 1)), ("..31DEC2019".to_string(), "100..".to_string()));
    assert_eq!((rs.cell_text(1, 0), rs.cell_text(1, 1)), ("01JAN2019".to_string(), "7".to_string()));
}

#[test]
fn a_rule_set_in_memory_parses_as_from_files_and_latin1_is_honoured() {
    let row = r#""a",,,,,,"DD",,"ZRH",,"0100/0199","0","0","FALSE","45""#;
    let csv = format!("{HEADER}\n{row}\n");
    // XML declares ISO-8859-1: é is one byte there, two in the UTF-8 CSV.
    let latin1: Vec<u8> = XML.replace("FLT_RG", "FLT_RG\u{e9}").chars().map(|c| c as u8).collect();
    let header = csv.replace("FLT_RG", "FLT_RG\u{e9}");
    let rs = offload_rules::parse(Path::new("t.xml"), latin1, Path::new("r.csv"), header.into_bytes()).unwrap();
    assert_eq!(rs.rule_type.criteria[4].code, "FLT_RG\u{e9}");
    let from_text = offload_rules::parse(Path::new("t.xml"), XML.into(), Path::new("r.csv"), csv.into()).unwrap();
    assert_eq!(
        (from_text.len(), &from_text.contents),
        (rules(&[row]).unwrap().len(), &rules(&[row]).unwrap().contents)
    );
    let e = offload_rules::parse(Path::new("t.txt"), vec![], Path::new("r.csv"), vec![]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadRuleType);
}

#[test]
fn errors_without_content_name_place_and_kind_but_quote_nothing() {
    let text = HEADER.replace("CRR", "SECRET-CARRIER") + "\n";
    let e = erbium::parse_rules(&rule_type(), Path::new("r.csv"), &text).unwrap_err();
    assert!(e.to_string().contains("SECRET-CARRIER"), "{e}");
    let safe = e.without_content();
    assert!(safe.starts_with("r.csv:1:68: error[unknown-criterion]: ") && !safe.contains("SECRET"), "{safe}");
}

#[test]
fn a_native_weight_that_is_not_a_non_negative_integer_is_located() {
    let toml = "code = \"W\"\n[[criterion]]\ncode = \"A\"\nkind = \"equ\"\nweight = 1\n\
                [[criterion]]\ncode = \"B\"\nkind = \"equ\"\nweight = WEIGHT\n";
    for (weight, shown) in [("-5", "-5"), ("1.5", "1.5"), ("\"-1\"", "\"-1\""), ("\"x\"", "\"x\"")] {
        let e = native::parse_rule_type(Path::new("t.toml"), &toml.replace("WEIGHT", weight)).unwrap_err();
        assert_eq!((e.kind, e.location.line, e.location.column), (ErrorKind::Toml, Some(9), Some(1)), "{weight}");
        let text = e.to_string();
        assert!(text.contains(&format!("weight {shown} of criterion B")) && text.contains("t.toml:9:1"), "{text}");
    }
    let big = toml.replace("WEIGHT", "\"18446744073709551615\"");
    assert_eq!(native::parse_rule_type(Path::new("t.toml"), &big).unwrap().criteria[1].weight, u64::MAX);
}
