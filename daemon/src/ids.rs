//! Random identifiers: agent ids (8 hex) and agent tokens (32 hex).

use std::io;

pub fn random_hex(bytes: usize) -> io::Result<String> {
    let mut buf = vec![0u8; bytes];
    grove_sys::random::fill(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// FNV-1a: a hash that never changes between builds, for names that must stay stable
/// on disk (unlike std's `DefaultHasher`).
pub fn stable_hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_has_two_digits_per_byte() {
        let id = super::random_hex(4).expect("random");
        assert_eq!(id.len(), 8);
        assert!(id
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }

    #[test]
    fn stable_hash_is_fnv1a() {
        assert_eq!(super::stable_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::stable_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
