//! Cgroups are Linux's: here the daemon's git helpers are found by its mark instead.

use std::io;

#[derive(Debug)]
pub struct GitCgroup(());

impl GitCgroup {
    pub fn start(_instance: &str) -> io::Result<GitCgroup> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("no cgroups on {}", crate::OS),
        ))
    }

    pub fn join(&self) -> io::Result<()> {
        Ok(())
    }

    pub fn dir(&self) -> &std::path::Path {
        std::path::Path::new("")
    }
}
