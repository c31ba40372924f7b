//! No Landlock here: a jail is refused, never replaced by no jail.

use std::io;
use std::path::PathBuf;

pub const REQUIRED_ABI: i32 = 6;

pub fn kernel_abi() -> i32 {
    0
}

#[derive(Debug)]
pub struct Jail(());

impl Jail {
    pub fn build(_writable: &[PathBuf]) -> Result<Jail, String> {
        Err(crate::unsupported("the Landlock jail").to_string())
    }

    pub fn enter(&self) -> io::Result<()> {
        Err(crate::unsupported("the Landlock jail"))
    }
}

pub fn describe_abi(_abi: i32) -> String {
    format!("has no Landlock (it is {}, not Linux)", crate::OS)
}
