//! Bytes in JSON: base64, the standard alphabet with padding (RFC 4648), through the
//! `base64` crate. Spawn input, terminal keys and output travel this way.

use base64::Engine;

pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("not base64 (standard alphabet, padded): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusal() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&bytes)), Ok(bytes));
        assert_eq!(encode(b"hi"), "aGk=");
        assert!(decode("not base64!").is_err());
    }
}
