//! The README's option tables are checked against the CLI definitions: every option of `serve`,
//! `check` and `render` has a row in the first table naming its flag, its environment variable
//! and its default, every option of `status`, of `relay` and of `get` and `watch` (one table for
//! both) one in its own table, and every row names an option that exists. On a mismatch the test prints the rows it expects
//! (flag, variable, default), so the table is regenerated from clap's definitions.

use std::collections::BTreeMap;

use clap::CommandFactory;

/// One option as the README's table shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    variable: String,
    default: String,
}

/// The rows the CLI definitions of `commands` call for, by long flag (`--listen`).
fn expected(commands: &[&str]) -> Result<BTreeMap<String, Row>, String> {
    let cli = super::Cli::command();
    let mut rows = BTreeMap::new();
    let mut missing_env = Vec::new();
    for name in commands.iter().copied() {
        let sub = cli
            .find_subcommand(name)
            .ok_or_else(|| format!("no subcommand {name}"))?;
        for arg in sub.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "version") {
                continue;
            }
            let flag = format!("--{long}");
            let Some(env) = arg.get_env() else {
                missing_env.push(format!("{name} {flag}"));
                continue;
            };
            let default = if arg.is_required_set() {
                "(required)".to_string()
            } else if !arg.get_action().takes_values() {
                "off".to_string()
            } else {
                let values: Vec<String> = arg
                    .get_default_values()
                    .iter()
                    .map(|v| format!("`{}`", v.to_string_lossy()))
                    .collect();
                if values.is_empty() {
                    "(none)".to_string()
                } else {
                    values.join(", ")
                }
            };
            rows.insert(
                flag,
                Row {
                    variable: format!("`{}`", env.to_string_lossy()),
                    default,
                },
            );
        }
    }
    if missing_env.is_empty() {
        Ok(rows)
    } else {
        Err(format!(
            "options without an environment variable: {missing_env:?}"
        ))
    }
}

/// The rows of the README's table under `header`, by the flag at the start of the first cell
/// (`` `--listen ADDR` ``).
fn documented(readme: &str, header: &str) -> Result<BTreeMap<String, Row>, String> {
    let start = readme
        .find(header)
        .ok_or_else(|| format!("README has no table starting {header:?}"))?;
    let mut rows = BTreeMap::new();
    for line in readme[start..].lines().skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line
            .split(" | ")
            .map(|c| c.trim_matches('|').trim())
            .collect();
        let [option, variable, default, _meaning] = cells[..] else {
            return Err(format!("a row without four cells: {line}"));
        };
        let flag = option
            .trim_start_matches('`')
            .split([' ', '`'])
            .next()
            .unwrap_or_default()
            .to_string();
        let row = Row {
            variable: variable.to_string(),
            default: default.to_string(),
        };
        if rows.insert(flag.clone(), row).is_some() {
            return Err(format!("{flag} has two rows"));
        }
    }
    Ok(rows)
}

#[test]
fn the_readme_option_table_lists_every_flag_with_its_variable_and_default() {
    check_table(
        &["serve", "check", "render"],
        "| option | variable | default | |",
    );
}

#[test]
fn the_readme_relay_table_lists_every_flag_of_relay_with_its_variable_and_default() {
    check_table(&["relay"], "| relay option | variable | default | |");
}

#[test]
fn the_readme_get_and_watch_table_lists_every_flag_of_both_with_its_variable_and_default() {
    check_table(
        &["get", "watch"],
        "| get / watch option | variable | default | |",
    );
}

#[test]
fn the_readme_status_table_lists_every_flag_of_status_with_its_variable_and_default() {
    check_table(&["status"], "| status option | variable | default | |");
}

fn check_table(commands: &[&str], header: &str) {
    let expected = expected(commands).unwrap();
    let readme = include_str!("../../../README.md");
    let documented = documented(readme, header).unwrap();
    let mut problems = Vec::new();
    for (flag, row) in &expected {
        match documented.get(flag) {
            None => problems.push(format!("{flag} is missing")),
            Some(doc) if doc != row => problems.push(format!(
                "{flag}: README says {} / {}, the CLI {} / {}",
                doc.variable, doc.default, row.variable, row.default
            )),
            Some(_) => {}
        }
    }
    for flag in documented.keys() {
        if !expected.contains_key(flag) {
            problems.push(format!("{flag} is in the README but is no option"));
        }
    }
    if !problems.is_empty() {
        let generated: Vec<String> = expected
            .iter()
            .map(|(flag, row)| format!("| `{flag}` | {} | {} | |", row.variable, row.default))
            .collect();
        panic!(
            "README table {header:?} out of date:\n{}\nrows from the CLI:\n{}",
            problems.join("\n"),
            generated.join("\n")
        );
    }
}
