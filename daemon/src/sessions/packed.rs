//! An archived session's history, stored compressed. When a session is archived its
//! snapshots' states and its checkpoints' writes are deflated in place: the same
//! columns hold a BLOB (deflate of the JSON) where they held TEXT (the JSON), and a
//! reader tells one from the other by the value's type. Rows stay packed when the
//! session is used again (reading them costs little); its new checkpoints are stored
//! plain until it is archived again.
//!
//! Deflate (miniz_oxide, pure Rust, no C code to build) over lz4: an archived session is
//! written once and seldom read, so the size matters more than the speed; see
//! docs/state-semantics.md ("Archived sessions") for what was measured.

use super::budget::WriterBytes;
use miniz_oxide::deflate::compress_to_vec;
use miniz_oxide::inflate::decompress_to_vec_with_limit;
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection};

/// Deflate's level. A 227 KiB state (release build): level 1 packs it to 25,064 bytes in
/// 0.38 ms, 6 to 21,295 in 2.8 ms, 9 to 21,325 in 4.7 ms; unpacking takes 0.33, 0.13 and
/// 0.17 ms. Packing happens once per archiving, reading on every use: 6.
const LEVEL: u8 = 6;

/// No stored value unpacks to more than this: a damaged BLOB is refused, not followed
/// into all the memory there is.
const MOST_UNPACKED: usize = 1 << 30;

/// `text` deflated, when that is smaller.
fn pack(text: &str) -> Option<Vec<u8>> {
    let packed = compress_to_vec(text.as_bytes(), LEVEL);
    (packed.len() < text.len()).then_some(packed)
}

/// The JSON in column `column` of `row`, stored plain (TEXT) or packed (BLOB).
pub fn json_text(row: &rusqlite::Row<'_>, column: usize) -> rusqlite::Result<String> {
    let bad = |e: Box<dyn std::error::Error + Send + Sync>| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Blob, e)
    };
    match row.get_ref(column)? {
        ValueRef::Blob(packed) => {
            let text = decompress_to_vec_with_limit(packed, MOST_UNPACKED)
                .map_err(|e| bad(format!("a packed value does not inflate: {e}").into()))?;
            String::from_utf8(text).map_err(|e| bad(e.into()))
        }
        _ => row.get(column),
    }
}

/// Packs the plain rows of session `name` (snapshots' states, checkpoints' writes), in
/// the caller's transaction; what each writer's stored bytes changed by (`tree_max_db`
/// counts what is stored).
pub fn pack_session(conn: &Connection, name: &str) -> rusqlite::Result<WriterBytes> {
    let before = super::store::session_writer_bytes(conn, name)?;
    for (table, column) in [("snapshots", "state"), ("checkpoints", "writes")] {
        let plain: Vec<(i64, String)> = conn
            .prepare_cached(&format!(
                "SELECT id, {column} FROM {table}
                 WHERE session = ?1 AND typeof({column}) = 'text'"
            ))?
            .query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut update = conn.prepare_cached(&format!(
            "UPDATE {table} SET {column} = ?3 WHERE session = ?1 AND id = ?2"
        ))?;
        for (id, text) in plain {
            if let Some(packed) = pack(&text) {
                update.execute(params![name, id, packed])?;
            }
        }
    }
    let after = super::store::session_writer_bytes(conn, name)?;
    Ok(super::budget::difference(&before, &after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_json_reads_back_and_small_values_stay_plain() {
        let conn = Connection::open_in_memory().expect("db");
        conn.execute_batch("CREATE TABLE t (v)").expect("table");
        let big = serde_json::json!({"notes": vec!["the same words again"; 200]}).to_string();
        let packed = pack(&big).expect("smaller");
        assert!(
            packed.len() * 10 < big.len(),
            "{} of {}",
            packed.len(),
            big.len()
        );
        assert_eq!(pack("[1]"), None);
        conn.execute("INSERT INTO t VALUES (?1), (?2)", params![packed, "[1]"])
            .expect("insert");
        let read: Vec<String> = conn
            .prepare("SELECT v FROM t ORDER BY rowid")
            .expect("prepare")
            .query_map([], |r| json_text(r, 0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("read");
        assert_eq!(read, vec![big, "[1]".to_string()]);
    }

    #[test]
    fn a_damaged_blob_is_an_error_not_a_panic() {
        let conn = Connection::open_in_memory().expect("db");
        let got = conn.query_row("SELECT x'00ff13'", [], |r| json_text(r, 0));
        assert!(got.is_err(), "{got:?}");
    }
}
