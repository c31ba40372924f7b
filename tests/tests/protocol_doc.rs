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
