//! The crate's modules in layers, bottom first: a module's code names only modules below it,
//! so no two depend on each other. The test reads the sources from `lib.rs` down, following
//! `mod` declarations, and fails on a `crate::` (or, at the top, `super::`) path that reaches
//! up, naming the file. Test modules (`#[cfg(test)]`) may reach anywhere and are skipped.
use std::{fs, path::Path};

/// Every top-level module, bottom first; a new one must take its place here.
const LAYERS: &[&str] = &[
    // Names for people: imports nothing from the crate.
    "present",
    // What is seen, and what is found.
    "observation",
    "finding",
    // Where a packet was seen, where packets come from, and what they say.
    "points",
    "source",
    "decode",
    // Detection, and the node's evidence.
    "analyzers",
    "answered_from",
    "enrich",
    // Output: the records declared, then written.
    "schema",
    "sink",
    // Reads the node's files and prints through the schema; bundles keep its view of the node.
    "doctor",
    "bundle",
    "recorder",
    "pipeline",
    // What the tests and the fuzzer build on: may use everything.
    "testkit",
];

/// The names of the modules declared in `source`, each with whether it is test-only; inline
/// modules (`mod name {`) are part of their file and not returned.
fn declared_modules(source: &str) -> Vec<(String, bool)> {
    let mut modules = Vec::new();
    let mut test_only = false;
    for line in source.lines().map(str::trim) {
        if line.starts_with("#[cfg(test)]") {
            test_only = true;
            continue;
        }
        let item = line
            .trim_start_matches("pub ")
            .trim_start_matches("pub(crate) ");
        if let Some(name) = item
            .strip_prefix("mod ")
            .and_then(|rest| rest.strip_suffix(';'))
        {
            modules.push((name.to_owned(), test_only));
        }
        if !line.starts_with("#[") {
            test_only = false;
        }
    }
    modules
}

/// `source` without its comments and from its first inline `#[cfg(test)] mod name {` on
/// (inline test modules close their files).
fn production_code(source: &str) -> String {
    let mut code = String::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        let next = lines.peek().map_or("", |next| next.trim());
        if line.trim() == "#[cfg(test)]" && next.starts_with("mod ") && next.ends_with('{') {
            break;
        }
        code.push_str(line.split("//").next().unwrap_or_default());
        code.push('\n');
    }
    code
}

/// The identifier `text` starts with.
fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The top-level modules a path written right after `crate::` names: one, or each at the top
/// of a `{...}` group.
fn named_after(path: &str) -> Vec<&str> {
    let Some(group) = path.strip_prefix('{') else {
        return vec![ident(path)];
    };
    let mut names = Vec::new();
    let mut depth = 0;
    let mut at_item = true;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_item = true,
            c if at_item && depth == 0 && (c.is_alphanumeric() || c == '_') => {
                names.push(ident(&group[at..]));
                at_item = false;
            }
            _ => {}
        }
    }
    names
}

/// The top-level modules `code` reaches through `prefix` paths.
fn reached<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    code.match_indices(prefix)
        .filter(|(at, _)| {
            let before = code[..*at].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .flat_map(|(at, _)| named_after(&code[at + prefix.len()..]))
        .collect()
}

/// Checks the module in `file` and those it declares, `depth` below the crate's root and in
/// top-level module `top` (empty for the root), adding each path that reaches above `top` to
/// `upward`.
fn check(file: &Path, depth: usize, top: &str, upward: &mut Vec<String>) {
    let source =
        fs::read_to_string(file).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
    let code = production_code(&source);
    if depth > 0 {
        let layer = |name: &str| LAYERS.iter().position(|layer| *layer == name);
        let own = layer(top).unwrap_or_else(|| panic!("`{top}` has no place in LAYERS"));
        let mut names = reached(&code, "crate::");
        if depth == 1 {
            names.extend(reached(&code, "super::"));
        }
        for name in names {
            if layer(name).is_some_and(|theirs| theirs > own) {
                let shown = file
                    .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                    .unwrap_or(file);
                upward.push(format!(
                    "{}: `{top}` uses `{name}`, a layer above it",
                    shown.display()
                ));
            }
        }
    }
    // A module's own modules sit in a directory named after it (beside `lib.rs` for the root).
    let dir = match file.file_name().and_then(|name| name.to_str()) {
        Some("lib.rs" | "mod.rs") => file.with_file_name(""),
        _ => file.with_extension(""),
    };
    for (name, test_only) in declared_modules(&code) {
        if test_only {
            continue;
        }
        let top = if depth == 0 { name.as_str() } else { top };
        let nested = dir.join(&name).join("mod.rs");
        let file = if nested.is_file() {
            nested
        } else {
            dir.join(format!("{name}.rs"))
        };
        check(&file, depth + 1, top, upward);
    }
}

#[test]
fn no_module_uses_one_in_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut upward = Vec::new();
    check(&src.join("lib.rs"), 0, "", &mut upward);
    assert!(
        upward.is_empty(),
        "move the type to the module that owns it, or a helper down to `present`:\n{}",
        upward.join("\n")
    );
}
