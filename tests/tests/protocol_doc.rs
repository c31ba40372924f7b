//! docs/protocol.md documents every method, event and error code in proto/.

use grove_proto::methods::{ALL_EVENTS, ALL_METHODS};

const DOC: &str = include_str!("../../docs/protocol.md");

#[test]
fn every_method_and_event_has_a_section() {
    for name in ALL_METHODS.iter().chain(ALL_EVENTS) {
        let heading = format!("### `{name}`");
        assert!(
            DOC.contains(&heading),
            "docs/protocol.md has no section `{heading}`"
        );
    }
}

#[test]
fn every_error_code_is_in_the_table() {
    let codes = include_str!("../../proto/src/codes.rs");
    for line in codes.lines().filter(|l| l.starts_with("pub const")) {
        let value = line
            .rsplit('=')
            .next()
            .unwrap_or("")
            .trim()
            .trim_end_matches(';');
        assert!(
            DOC.contains(&format!("| {value} |")),
            "code {value} is not documented"
        );
    }
}

/// The Authority section's table says who may call each method as the method's type
/// does (`Method::CALLERS`), row for row.
#[test]
fn the_authority_table_says_who_may_call_each_method_as_its_type_does() {
    use grove_proto::methods::{Callers, METHOD_CALLERS};
    let documented: Vec<(&str, &str)> = DOC
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            match cells.as_slice() {
                ["", method, who, ""] if method.starts_with('`') => {
                    Some((method.trim_matches('`'), *who))
                }
                _ => None,
            }
        })
        .filter(|(method, _)| ALL_METHODS.contains(method))
        .collect();
    let typed: Vec<(&str, &str)> = METHOD_CALLERS
        .iter()
        .map(|(method, callers)| {
            let who = match callers {
                Callers::Anyone => "anyone",
                Callers::OwnSession => "own session",
                Callers::User(_) => "user",
            };
            (*method, who)
        })
        .collect();
    assert_eq!(documented, typed);
}
