//! The small tables of the TOML files a user writes (`[notify]`, `[agents.NAME]`): their
//! keys, lists and flags, with errors that say where (`at` names the table).

use toml::Table;

/// Refuses a key of `table` that is not one of `known`, the keys `owner` has.
pub fn only_known_keys(table: &Table, known: &[&str], at: &str, owner: &str) -> Result<(), String> {
    match table.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(format!(
            "{at}: unknown key `{unknown}`; {owner} has {}",
            in_words(known)
        )),
        None => Ok(()),
    }
}

/// `a, b and c`.
fn in_words(items: &[&str]) -> String {
    match items.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The list of strings at `key`, `None` without one.
pub fn strings(table: &Table, key: &str, at: &str) -> Result<Option<Vec<String>>, String> {
    let Some(value) = table.get(key) else {
        return Ok(None);
    };
    value
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .map(|i| i.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
        })
        .map(Some)
        .ok_or_else(|| format!("{at}: `{key}` must be a list of strings"))
}

/// The true or false at `key`, `default` without one.
pub fn flag(table: &Table, key: &str, default: bool, at: &str) -> Result<bool, String> {
    match table.get(key) {
        None => Ok(default),
        Some(toml::Value::Boolean(b)) => Ok(*b),
        Some(_) => Err(format!("{at}: `{key}` must be true or false")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keys_in_words() {
        assert_eq!(in_words(&["command"]), "command");
        assert_eq!(in_words(&["command", "tty"]), "command and tty");
        assert_eq!(
            in_words(&["command", "headless", "tty", "env"]),
            "command, headless, tty and env"
        );
    }
}
