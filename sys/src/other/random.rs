//! Random bytes from /dev/urandom, which every Unix has.

use std::io::{self, Read};

pub fn fill(buf: &mut [u8]) -> io::Result<()> {
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}
