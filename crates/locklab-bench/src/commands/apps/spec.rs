//! App specs: one TOML file per app (the shipped ones in `crates/locklab-bench/apps/`, built into the
//! binary; a user's own through `locklab apps --spec FILE`). Every key is checked: a missing or
//! unknown key, a value of the wrong type, an unknown placeholder or a regular expression without a
//! group is one line naming the file, the key and the problem.
//!
//! ```toml
//! name = "tokyo-hash"                 # the row's name
//! what = "Tokyo Cabinet hash DB"      # one line: what it runs
//! programs = ["tchmttest"]            # executables that must be on PATH (else: unavailable)
//! packages = ["tokyocabinet-bin"]     # what to install for them
//! control = false                     # optional: expected not to move with the lock
//!
//! [input]                             # optional: the scratch directory's `input`, made once
//! words_bytes = 50331648              #   pseudo-random text of this size (at most 1 GiB), or
//! # command = "sh -c ..."             #   a command run there
//! # timeout_s = 300                   #   optional: the command's bound (1-3600 s, default 300)
//!
//! [server]                            # optional: started under the lock choice first
//! command = "memcached -p {PORT} -t {T}"
//! ready = "port"                      # wait until {PORT} accepts a connection
//!
//! [run]
//! command = "tchmttest write -rnd {DIR}/a.tch {T} {N}"
//! records = 100000                    # {N}, records a thread (a tenth under --quick; at most 10^9)
//! # timeout_s = 600                   # optional: one run's bound (1-3600 s, default 600)
//!
//! [rate]
//! kind = "records"                    # threads x records / wall; "bytes" (bytes / wall);
//! # regex = "TPS: ([0-9.]+)"          # "regex": its first group, last match in the output,
//! # per_load_second = true            #   divided by {S} when the count is a total
//!
//! [verify]                            # besides exit status 0
//! ok_line = "ok"                      # a line that must be there (trimmed)
//! error_line = "error"                # a line that must not
//! # contains = "TPS:"                 # text that must be in the output
//! ```
//!
//! Every step is bounded: the input command and each run by their `timeout_s`, a server by 10 s to
//! listen on its port; one that does not finish is one line naming the step and its key.
//!
//! Placeholders in commands: `{DIR}` the scratch directory, `{T}` the threads, `{N}` the records a
//! thread, `{S}` the seconds of load, `{PORT}` the server's port, `{_}` a space inside a word
//! (commands are split on spaces).

use super::{App, Input, Rate, Verify};
use std::time::Duration;
use toml::{Table, Value};

/// The most `input.words_bytes` may ask for: 1 GiB.
pub const MAX_WORDS_BYTES: i64 = 1 << 30;
/// The most `run.records` may ask for.
pub const MAX_RECORDS: i64 = 1_000_000_000;
/// The most any `timeout_s` may be, seconds.
pub const MAX_TIMEOUT_S: i64 = 3600;
/// `input.timeout_s` unless the spec says.
pub const DEFAULT_INPUT_TIMEOUT_S: u64 = 300;
/// `run.timeout_s` unless the spec says.
pub const DEFAULT_RUN_TIMEOUT_S: u64 = 600;

/// The shipped specs, in lab.md's order.
pub const BUILT_IN: [(&str, &str); 7] = [
    (
        "tokyo-hash.toml",
        include_str!("../../../apps/tokyo-hash.toml"),
    ),
    (
        "tokyo-btree.toml",
        include_str!("../../../apps/tokyo-btree.toml"),
    ),
    (
        "kyoto-order.toml",
        include_str!("../../../apps/kyoto-order.toml"),
    ),
    (
        "kyoto-wicked.toml",
        include_str!("../../../apps/kyoto-wicked.toml"),
    ),
    (
        "memcached.toml",
        include_str!("../../../apps/memcached.toml"),
    ),
    (
        "sysbench-threads.toml",
        include_str!("../../../apps/sysbench-threads.toml"),
    ),
    ("pigz.toml", include_str!("../../../apps/pigz.toml")),
];

const PLACEHOLDERS: [&str; 6] = ["{DIR}", "{T}", "{N}", "{S}", "{PORT}", "{_}"];

/// Reads one spec; `Err` is the one line to print (file, key, problem).
pub fn parse(file: &str, text: &str) -> Result<App, String> {
    let table = parse_table(file, text)?;
    known(
        file,
        "",
        &table,
        &[
            "name", "what", "programs", "packages", "control", "input", "server", "run", "rate",
            "verify",
        ],
    )?;
    let name = name_of(file, &table)?;
    let what = string(file, &table, "what")?;
    let programs = strings(file, &table, "programs")?;
    if programs.is_empty() {
        return Err(at(file, "programs", "names no program".into()));
    }
    let packages = strings(file, &table, "packages")?;
    let control = flag(file, &table, "control", "control")?;
    let run =
        section(file, &table, "run")?.ok_or_else(|| at(file, "run", "missing section".into()))?;
    known(file, "run.", run, &["command", "records", "timeout_s"])?;
    let args = command(file, run, "run.command", "command")?;
    let records = records_of(file, run)?;
    let run_timeout = timeout(file, run, "run.timeout_s", DEFAULT_RUN_TIMEOUT_S)?;
    let rate = rate_of(file, &table, records)?;
    let verify = verify_of(file, &table)?;
    let server = server_of(file, &table)?;
    let (input, input_timeout) = input_of(file, &table)?;
    Ok(App {
        name,
        programs,
        package: packages.join(" "),
        what,
        control,
        args,
        records,
        rate,
        verify,
        server,
        input,
        input_timeout,
        run_timeout,
        source: file.to_string(),
    })
}

/// The one line naming the file, the key and the problem.
fn at(file: &str, key: &str, problem: String) -> String {
    format!("spec {file}: `{key}`: {problem}")
}

/// The spec's TOML table; a syntax error names its line.
fn parse_table(file: &str, text: &str) -> Result<Table, String> {
    text.parse::<Table>().map_err(|e| {
        let msg = e.message().to_string();
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        match line {
            Some(l) => format!("spec {file}: line {l}: {msg}"),
            None => format!("spec {file}: {msg}"),
        }
    })
}

/// `name`: letters, digits, - and _.
fn name_of(file: &str, table: &Table) -> Result<String, String> {
    let name = string(file, table, "name")?;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(at(
            file,
            "name",
            format!("`{name}` is not a name (letters, digits, - and _)"),
        ));
    }
    Ok(name)
}

/// An optional boolean `key` of `t` (`full` is its name in the spec), false if absent.
fn flag(file: &str, t: &Table, full: &str, key: &str) -> Result<bool, String> {
    match t.get(key) {
        None => Ok(false),
        Some(Value::Boolean(b)) => Ok(*b),
        Some(v) => Err(at(
            file,
            full,
            format!("expected true or false, found {}", v.type_str()),
        )),
    }
}

/// `run.records` (0 if absent).
fn records_of(file: &str, run: &Table) -> Result<usize, String> {
    match run.get("records") {
        None => Ok(0),
        Some(Value::Integer(n)) if (1..=MAX_RECORDS).contains(n) => Ok(*n as usize),
        Some(v) => Err(at(
            file,
            "run.records",
            format!(
                "expected an integer from 1 to {MAX_RECORDS}, found {}",
                show(v)
            ),
        )),
    }
}

/// The `[rate]` section (`records`: `run.records`, which `kind = "records"` needs).
fn rate_of(file: &str, table: &Table, records: usize) -> Result<Rate, String> {
    let rate =
        section(file, table, "rate")?.ok_or_else(|| at(file, "rate", "missing section".into()))?;
    known(
        file,
        "rate.",
        rate,
        &["kind", "bytes", "regex", "per_load_second"],
    )?;
    let kind = sub_string(file, rate, "rate.kind", "kind")?;
    match kind.as_str() {
        "records" => {
            if records == 0 {
                return Err(at(
                    file,
                    "run.records",
                    "missing (rate.kind = \"records\" needs it)".into(),
                ));
            }
            Ok(Rate::Records)
        }
        "bytes" => match rate.get("bytes") {
            Some(Value::Integer(n)) if (1..=1i64 << 53).contains(n) => Ok(Rate::Bytes(*n as f64)),
            Some(v) => Err(at(
                file,
                "rate.bytes",
                format!("expected an integer from 1 to 2^53, found {}", show(v)),
            )),
            None => Err(at(
                file,
                "rate.bytes",
                "missing (rate.kind = \"bytes\" needs it)".into(),
            )),
        },
        "regex" => rate_regex(file, rate),
        other => Err(at(
            file,
            "rate.kind",
            format!("unknown kind `{other}` (valid: records, bytes, regex)"),
        )),
    }
}

/// `rate.kind = "regex"`: `rate.regex`, with a group, and `rate.per_load_second`.
fn rate_regex(file: &str, rate: &Table) -> Result<Rate, String> {
    let r = sub_string(file, rate, "rate.regex", "regex")?;
    let re = regex::Regex::new(&r).map_err(|e| {
        let e = e.to_string();
        at(
            file,
            "rate.regex",
            format!(
                "not a regular expression ({})",
                e.lines().last().unwrap_or("").trim()
            ),
        )
    })?;
    if re.captures_len() < 2 {
        return Err(at(
            file,
            "rate.regex",
            "has no group: put the number in parentheses".into(),
        ));
    }
    let per = flag(file, rate, "rate.per_load_second", "per_load_second")?;
    Ok(Rate::Regex {
        re,
        per_load_second: per,
    })
}

/// The optional `[verify]` section.
fn verify_of(file: &str, table: &Table) -> Result<Verify, String> {
    let Some(v) = section(file, table, "verify")? else {
        return Ok(Verify::default());
    };
    known(file, "verify.", v, &["ok_line", "error_line", "contains"])?;
    let opt = |k: &str| -> Result<Option<String>, String> {
        match v.get(k) {
            None => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(x) => Err(at(
                file,
                &format!("verify.{k}"),
                format!("expected a non-empty string, found {}", show(x)),
            )),
        }
    };
    Ok(Verify {
        ok_line: opt("ok_line")?,
        error_line: opt("error_line")?,
        contains: opt("contains")?,
    })
}

/// The optional `[server]` section: its command, which must listen on `{PORT}`.
fn server_of(file: &str, table: &Table) -> Result<Option<String>, String> {
    let Some(s) = section(file, table, "server")? else {
        return Ok(None);
    };
    known(file, "server.", s, &["command", "ready"])?;
    let c = command(file, s, "server.command", "command")?;
    match s.get("ready") {
        None => {}
        Some(Value::String(r)) if r == "port" => {}
        Some(v) => {
            return Err(at(
                file,
                "server.ready",
                format!("unknown readiness {} (valid: \"port\")", show(v)),
            ));
        }
    }
    if !c.contains("{PORT}") {
        return Err(at(
            file,
            "server.command",
            "has no {PORT} (readiness is its port accepting a connection)".into(),
        ));
    }
    Ok(Some(c))
}

/// The optional `[input]` section and the input command's bound.
fn input_of(file: &str, table: &Table) -> Result<(Option<Input>, Duration), String> {
    let Some(i) = section(file, table, "input")? else {
        return Ok((None, Duration::from_secs(DEFAULT_INPUT_TIMEOUT_S)));
    };
    known(file, "input.", i, &["words_bytes", "command", "timeout_s"])?;
    let input_timeout = timeout(file, i, "input.timeout_s", DEFAULT_INPUT_TIMEOUT_S)?;
    if i.contains_key("timeout_s") && !i.contains_key("command") {
        return Err(at(
            file,
            "input.timeout_s",
            "bounds the input command: there is none".into(),
        ));
    }
    let input = match (i.get("words_bytes"), i.get("command")) {
        (Some(Value::Integer(n)), None) if (1..=MAX_WORDS_BYTES).contains(n) => {
            Input::Words(*n as usize)
        }
        (Some(v), None) => {
            return Err(at(
                file,
                "input.words_bytes",
                format!(
                    "expected an integer from 1 to {MAX_WORDS_BYTES} (1 GiB), found {}",
                    show(v)
                ),
            ));
        }
        (None, Some(_)) => Input::Command(command(file, i, "input.command", "command")?),
        (None, None) => return Err(at(file, "input", "needs words_bytes or command".into())),
        (Some(_), Some(_)) => {
            return Err(at(
                file,
                "input",
                "has both words_bytes and command: one of them".into(),
            ));
        }
    };
    Ok((Some(input), input_timeout))
}

/// A step's bound (`key`, seconds, 1 to [`MAX_TIMEOUT_S`]), `default` if absent.
fn timeout(file: &str, t: &Table, full: &str, default: u64) -> Result<Duration, String> {
    let key = full.rsplit('.').next().unwrap_or(full);
    match t.get(key) {
        None => Ok(Duration::from_secs(default)),
        Some(Value::Integer(n)) if (1..=MAX_TIMEOUT_S).contains(n) => {
            Ok(Duration::from_secs(*n as u64))
        }
        Some(v) => Err(format!(
            "spec {file}: `{full}`: expected seconds from 1 to {MAX_TIMEOUT_S}, found {}",
            show(v)
        )),
    }
}

/// A value as it was written (strings quoted), for an error line.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Integer(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
        other => format!("a {}", other.type_str()),
    }
}

fn known(file: &str, prefix: &str, t: &Table, keys: &[&str]) -> Result<(), String> {
    for k in t.keys() {
        if !keys.contains(&k.as_str()) {
            return Err(format!(
                "spec {file}: `{prefix}{k}`: unknown key (valid here: {})",
                keys.join(", ")
            ));
        }
    }
    Ok(())
}

fn string(file: &str, t: &Table, key: &str) -> Result<String, String> {
    sub_string(file, t, key, key)
}

fn sub_string(file: &str, t: &Table, full: &str, key: &str) -> Result<String, String> {
    match t.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(format!(
            "spec {file}: `{full}`: expected a string, found {}",
            v.type_str()
        )),
        None => Err(format!("spec {file}: `{full}`: missing key")),
    }
}

fn strings(file: &str, t: &Table, key: &str) -> Result<Vec<String>, String> {
    match t.get(key) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                _ => Err(format!(
                    "spec {file}: `{key}`: expected a list of names, found {}",
                    show(v)
                )),
            })
            .collect(),
        Some(v) => Err(format!(
            "spec {file}: `{key}`: expected a list of strings, found {}",
            v.type_str()
        )),
        None => Err(format!("spec {file}: `{key}`: missing key")),
    }
}

fn section<'a>(file: &str, t: &'a Table, key: &str) -> Result<Option<&'a Table>, String> {
    match t.get(key) {
        None => Ok(None),
        Some(Value::Table(s)) => Ok(Some(s)),
        Some(v) => Err(format!(
            "spec {file}: `{key}`: expected a section ([{key}]), found {}",
            v.type_str()
        )),
    }
}

/// A command template: non-empty, placeholders known.
fn command(file: &str, t: &Table, full: &str, key: &str) -> Result<String, String> {
    let c = sub_string(file, t, full, key)?;
    if c.trim().is_empty() {
        return Err(format!("spec {file}: `{full}`: empty command"));
    }
    let mut rest = c.as_str();
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .map(|c| open + c + 1)
            .unwrap_or(rest.len());
        let p = &rest[open..close];
        if !PLACEHOLDERS.contains(&p) {
            return Err(format!(
                "spec {file}: `{full}`: unknown placeholder `{p}` (valid: {})",
                PLACEHOLDERS.join(" ")
            ));
        }
        rest = &rest[close..];
    }
    Ok(c)
}

/// The built-in apps.
pub fn built_in() -> Vec<App> {
    BUILT_IN
        .iter()
        .map(|(f, t)| parse(f, t).unwrap_or_else(|e| panic!("a shipped spec does not parse: {e}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "mine"
what = "my program"
programs = ["sh"]
packages = ["dash"]
[run]
command = "sh -c echo{_}ok"
[rate]
kind = "regex"
regex = "ops: ([0-9]+)"
[verify]
ok_line = "ok"
"#;

    #[test]
    fn every_shipped_spec_parses() {
        let apps = built_in();
        assert_eq!(apps.len(), 7);
        assert!(apps.iter().any(|a| a.name == "pigz" && a.control));
        assert!(parse("mine.toml", GOOD).is_ok());
    }

    #[test]
    fn each_mistake_is_one_line_naming_file_and_key() {
        let cases: [(&str, &str, &str); 9] = [
            ("name = ", "", "line 2"),
            ("run.command", "", "`run`: missing section"),
            (
                "command = \"sh -c echo{_}ok\"",
                "",
                "`run.command`: missing key",
            ),
            (
                "kind = \"regex\"",
                "kind = \"nope\"",
                "`rate.kind`: unknown kind `nope`",
            ),
            ("([0-9]+)", "[0-9]+", "`rate.regex`: has no group"),
            ("ok_line", "okline", "`verify.okline`: unknown key"),
            (
                "echo{_}ok",
                "echo{X}ok",
                "`run.command`: unknown placeholder `{X}`",
            ),
            (
                "programs = [\"sh\"]",
                "programs = \"sh\"",
                "`programs`: expected a list",
            ),
            ("what = \"my program\"\n", "", "`what`: missing key"),
        ];
        for (from, to, want) in cases {
            let text = if from == "run.command" {
                GOOD.replace("[run]\ncommand = \"sh -c echo{_}ok\"\n", "")
            } else if from == "name = " {
                GOOD.replace("name = \"mine\"", "name = ")
            } else {
                GOOD.replacen(from, to, 1)
            };
            let e = parse("my.toml", &text).unwrap_err();
            assert!(e.starts_with("spec my.toml: "), "{e}");
            assert!(e.contains(want), "want {want:?} in {e:?}");
            assert!(!e.contains('\n'), "one line: {e:?}");
        }
    }
}
