//! The JSON output reference, docs/output.md, generated from this module's doc comments: the
//! records are declared once, here, and docs/output.md says what they say.
//! `output_doc_documents_the_schema` fails when the two differ;
//! `DNSLOOP_BLESS=1 cargo test -p dnsloop-core output_doc` rewrites its generated part.
//!
//! The declarations are read as written, in the one layout this module keeps to: `///` doc
//! lines, then `#[serde(...)]` lines, then `pub struct Name {` or `pub enum Name {`; in a
//! struct one field per line, `pub name: Type,`, each after its doc lines; in an enum one
//! variant per line, `Variant(Type),`. `every_field_printed_is_declared_in_order` holds that
//! reading to what serde prints.
use std::collections::BTreeMap;

use serde_json::Value;

const SOURCES: [&str; 17] = [
    include_str!("mod.rs"),
    include_str!("loop_record.rs"),
    include_str!("lookup.rs"),
    include_str!("unexpected_source.rs"),
    include_str!("timeout.rs"),
    include_str!("truncation.rs"),
    include_str!("search_list.rs"),
    include_str!("servfail.rs"),
    include_str!("fragmentation.rs"),
    include_str!("drop.rs"),
    include_str!("bundle.rs"),
    include_str!("malformed.rs"),
    include_str!("packet.rs"),
    include_str!("summary.rs"),
    include_str!("probe.rs"),
    include_str!("doctor.rs"),
    include_str!("capture.rs"),
];

/// What is documented, in this order, each type followed by those it holds.
const ROOTS: [&str; 3] = ["Record", "DoctorRecord", "CaptureReport"];

const OUTPUT_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/output.md");
const BEGIN: &str = "<!-- schema: generated from dnsloop-userspace/core/src/schema by `DNSLOOP_BLESS=1 cargo test -p dnsloop-core output_doc`; edit the doc comments there -->";
const END: &str = "<!-- schema: end -->";

/// A struct or an enum of the schema, as declared.
#[derive(Debug)]
struct Item {
    name: String,
    doc: String,
    /// `#[serde(...)]` of the item: `tag = "kind"`, `untagged`, ...
    serde: Vec<String>,
    is_enum: bool,
    /// Fields (name, type, doc, serde attributes), or variants (name, type, doc).
    members: Vec<Member>,
}

#[derive(Debug)]
struct Member {
    name: String,
    ty: String,
    doc: String,
    serde: Vec<String>,
}

impl Member {
    /// Its key in JSON.
    fn key(&self) -> String {
        serde_value(&self.serde, "rename").unwrap_or_else(|| self.name.clone())
    }

    fn flattened(&self) -> bool {
        self.serde.iter().any(|attr| attr == "flatten")
    }
}

impl Item {
    /// The `kind` of an object of this struct when it is a variant of a tagged enum, or tags
    /// itself.
    fn own_tag(&self) -> Option<(String, String)> {
        let tag = serde_value(&self.serde, "tag")?;
        Some((tag, serde_value(&self.serde, "rename")?))
    }

    fn tagged(&self) -> Option<String> {
        serde_value(&self.serde, "tag")
    }
}

/// The value of `key = "value"` among serde attributes.
fn serde_value(attrs: &[String], key: &str) -> Option<String> {
    attrs.iter().find_map(|attr| {
        let value = attr
            .strip_prefix(key)?
            .trim_start()
            .strip_prefix('=')?
            .trim();
        Some(value.trim_matches('"').to_owned())
    })
}

/// The comma-separated parts of `#[serde(a, b = "c")]`.
fn serde_attrs(line: &str) -> Option<Vec<String>> {
    let inner = line.trim().strip_prefix("#[serde(")?.strip_suffix(")]")?;
    Some(inner.split(", ").map(str::to_owned).collect())
}

fn doc_line(line: &str) -> Option<&str> {
    let text = line.trim().strip_prefix("///")?;
    Some(text.strip_prefix(' ').unwrap_or(text))
}

fn join(doc: &mut Vec<String>) -> String {
    let text = doc.join(" ");
    doc.clear();
    text
}

/// Every struct and enum with named members declared in `source`.
fn items(source: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut doc = Vec::new();
    let mut serde = Vec::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        if let Some(text) = doc_line(line).filter(|_| !line.starts_with(' ')) {
            doc.push(text.to_owned());
            continue;
        }
        if let Some(attrs) = serde_attrs(line).filter(|_| !line.starts_with(' ')) {
            serde.extend(attrs);
            continue;
        }
        if line.starts_with("#[derive(") {
            continue;
        }
        let header = line
            .strip_prefix("pub struct ")
            .map(|rest| (rest, false))
            .or_else(|| line.strip_prefix("pub enum ").map(|rest| (rest, true)));
        let Some((name, is_enum)) =
            header.and_then(|(rest, is_enum)| Some((rest.strip_suffix(" {")?.to_owned(), is_enum)))
        else {
            doc.clear();
            serde.clear();
            continue;
        };
        let mut item = Item {
            name,
            doc: join(&mut doc),
            serde: std::mem::take(&mut serde),
            is_enum,
            members: Vec::new(),
        };
        let mut member_serde = Vec::new();
        for line in lines.by_ref() {
            if line == "}" {
                break;
            }
            if let Some(text) = doc_line(line) {
                doc.push(text.to_owned());
            } else if let Some(attrs) = serde_attrs(line) {
                member_serde.extend(attrs);
            } else {
                let line = line.trim();
                let (name, ty) = if is_enum {
                    let (name, ty) = line
                        .strip_suffix("),")
                        .and_then(|line| line.split_once('('))
                        .unwrap_or_else(|| panic!("{}: not a `Variant(Type),`: {line}", item.name));
                    (name, ty)
                } else {
                    line.strip_prefix("pub ")
                        .and_then(|line| line.strip_suffix(','))
                        .and_then(|line| line.split_once(": "))
                        .unwrap_or_else(|| panic!("{}: not a `pub name: Type,`: {line}", item.name))
                };
                let member = Member {
                    name: name.to_owned(),
                    ty: ty.to_owned(),
                    doc: join(&mut doc),
                    serde: std::mem::take(&mut member_serde),
                };
                assert!(
                    !member.doc.is_empty(),
                    "{}.{} has no doc comment: say what it means",
                    item.name,
                    member.name
                );
                item.members.push(member);
            }
        }
        assert!(!item.doc.is_empty(), "{} has no doc comment", item.name);
        items.push(item);
    }
    items
}

fn schema() -> BTreeMap<String, Item> {
    SOURCES
        .iter()
        .flat_map(|source| items(source))
        .map(|item| (item.name.clone(), item))
        .collect()
}

/// The schema types `ty` holds (`Vec<Hop>` holds `Hop`).
fn held<'a>(ty: &'a str, schema: &BTreeMap<String, Item>) -> Vec<&'a str> {
    ty.split(['<', '>', ',', ' '])
        .filter(|part| schema.contains_key(*part))
        .collect()
}

fn link(name: &str) -> String {
    format!("[`{name}`](#{})", name.to_lowercase())
}

/// `ty` in words, for a person reading JSON.
fn json_type(ty: &str, schema: &BTreeMap<String, Item>) -> String {
    if let Some(inner) = ty
        .strip_prefix("Option<")
        .and_then(|ty| ty.strip_suffix('>'))
    {
        return format!("{} or null", json_type(inner, schema));
    }
    // A box is how Rust holds a large part; JSON sees the part.
    if let Some(inner) = ty.strip_prefix("Box<").and_then(|ty| ty.strip_suffix('>')) {
        return json_type(inner, schema);
    }
    if let Some(inner) = ty.strip_prefix("Vec<").and_then(|ty| ty.strip_suffix('>')) {
        return format!("array of {}", json_type(inner, schema));
    }
    if let Some(inner) = ty
        .strip_prefix("ByName<")
        .and_then(|ty| ty.strip_suffix('>'))
    {
        return format!("object: {} by name", json_type(inner, schema));
    }
    match ty {
        "Counts" => "object: integer by name".to_owned(),
        "Timestamp" => "time".to_owned(),
        "SocketAddr" => "address".to_owned(),
        "IpAddr" => "IP address".to_owned(),
        "String" => "string".to_owned(),
        "u16" | "u32" | "u64" | "usize" => "integer".to_owned(),
        "f64" => "number".to_owned(),
        "bool" => "boolean".to_owned(),
        named if schema.contains_key(named) => link(named),
        unknown => panic!("no JSON type for {unknown}: add it to `json_type`"),
    }
}

/// `LoopRecord` -> `loop`, as `rename_all = "snake_case"` names variants.
fn snake_case(name: &str) -> String {
    let mut snake = String::new();
    for (at, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && at > 0 {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    snake
}

/// The `kind` of each variant of a tagged enum, by the type it holds.
fn kinds(schema: &BTreeMap<String, Item>) -> BTreeMap<String, (String, String)> {
    let mut kinds = BTreeMap::new();
    for item in schema.values().filter(|item| item.is_enum) {
        if let Some(tag) = item.tagged() {
            for variant in &item.members {
                kinds.insert(variant.ty.clone(), (tag.clone(), snake_case(&variant.name)));
            }
        }
    }
    for item in schema.values().filter(|item| !item.is_enum) {
        if let Some(tag) = item.own_tag() {
            kinds.insert(item.name.clone(), tag);
        }
    }
    kinds
}

fn cell(text: &str) -> &str {
    assert!(
        !text.contains('|'),
        "a `|` would break docs/output.md's table: {text}"
    );
    text
}

/// docs/output.md's generated part.
fn generate() -> String {
    let schema = schema();
    let kinds = kinds(&schema);
    let mut order = Vec::new();
    let mut to_visit: Vec<&str> = ROOTS.iter().rev().copied().collect();
    while let Some(name) = to_visit.pop() {
        if order.contains(&name) {
            continue;
        }
        order.push(name);
        let item = &schema[name];
        let mut inner: Vec<&str> = item
            .members
            .iter()
            .flat_map(|member| held(&member.ty, &schema))
            .collect();
        inner.reverse();
        to_visit.extend(inner);
    }
    let unreached: Vec<&String> = schema
        .keys()
        .filter(|name| !order.contains(&name.as_str()))
        .collect();
    assert!(
        unreached.is_empty(),
        "not reachable from {ROOTS:?}: {unreached:?}"
    );

    let mut text = format!("{BEGIN}\n");
    for name in order {
        let item = &schema[name];
        text.push_str(&format!("\n### `{name}`\n\n{}\n\n", item.doc));
        if item.is_enum {
            match item.tagged() {
                Some(tag) => {
                    text.push_str(&format!(
                        "| `{tag}` | record | what |\n| --- | --- | --- |\n"
                    ));
                    for variant in &item.members {
                        text.push_str(&format!(
                            "| `{}` | {} | {} |\n",
                            snake_case(&variant.name),
                            link(&variant.ty),
                            cell(&variant.doc)
                        ));
                    }
                }
                None => {
                    text.push_str("| record | when |\n| --- | --- |\n");
                    for variant in &item.members {
                        text.push_str(&format!(
                            "| {} | {} |\n",
                            link(&variant.ty),
                            cell(&variant.doc)
                        ));
                    }
                }
            }
            continue;
        }
        text.push_str("| field | type | meaning |\n| --- | --- | --- |\n");
        if let Some((tag, kind)) = kinds.get(name) {
            text.push_str(&format!(
                "| `{tag}` | `\"{kind}\"` | Says which record this is: always `{kind}`. |\n"
            ));
        }
        for field in &item.members {
            let (key, ty) = if field.flattened() {
                (
                    "*(flattened)*".to_owned(),
                    format!("the fields of {}", json_type(&field.ty, &schema)),
                )
            } else {
                (format!("`{}`", field.key()), json_type(&field.ty, &schema))
            };
            text.push_str(&format!("| {key} | {ty} | {} |\n", cell(&field.doc)));
        }
    }
    text.push_str(&format!("\n{END}"));
    text
}

#[test]
fn output_doc_documents_the_schema() {
    let generated = generate();
    let doc = std::fs::read_to_string(OUTPUT_DOC).expect("docs/output.md");
    let (before, rest) = doc
        .split_once(BEGIN)
        .unwrap_or_else(|| panic!("docs/output.md has no line {BEGIN}"));
    let (section, after) = rest
        .split_once(END)
        .unwrap_or_else(|| panic!("docs/output.md has no line {END}"));
    let current = format!("{BEGIN}{section}{END}");
    if current == generated {
        return;
    }
    if std::env::var_os("DNSLOOP_BLESS").is_some() {
        std::fs::write(OUTPUT_DOC, format!("{before}{generated}{after}"))
            .expect("writing docs/output.md");
        return;
    }
    panic!(
        "docs/output.md is not what the schema declares: run \
         `DNSLOOP_BLESS=1 cargo test -p dnsloop-core output_doc` and commit docs/output.md.\n\
         --- generated ---\n{generated}"
    );
}

/// Checks that `value`, an object of type `name`, has exactly the keys the declaration of
/// `name` says, in its order, and so on for the objects it holds.
fn check_keys(value: &Value, name: &str, schema: &BTreeMap<String, Item>, path: &str) {
    let kinds = kinds(schema);
    let item = &schema[name];
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("{path}: not an object: {value}"));
    let printed: Vec<&str> = object.keys().map(String::as_str).collect();
    let mut declared: Vec<String> = Vec::new();
    let mut holds: Vec<(String, &str)> = Vec::new();
    if let Some((tag, _)) = kinds.get(name) {
        declared.push(tag.clone());
    }
    for field in &item.members {
        if field.flattened() {
            // The variant whose first field is printed here.
            let source = &schema[field.ty.as_str()];
            let variant = source
                .members
                .iter()
                .map(|variant| &schema[variant.ty.as_str()])
                .find(|variant| {
                    variant
                        .members
                        .iter()
                        .all(|member| object.contains_key(&member.key()))
                })
                .unwrap_or_else(|| panic!("{path}: no variant of {} fits {value}", field.ty));
            for member in &variant.members {
                declared.push(member.key());
                for inner in held(&member.ty, schema) {
                    holds.push((member.key(), inner));
                }
            }
        } else {
            declared.push(field.key());
            for inner in held(&field.ty, schema) {
                holds.push((field.key(), inner));
            }
        }
    }
    assert_eq!(
        printed, declared,
        "{path}: the keys printed are not those declared"
    );
    for (key, inner) in holds {
        let held_values = match &object[&key] {
            Value::Array(values) => values.iter().collect(),
            Value::Null => Vec::new(),
            single => vec![single],
        };
        for (at, held_value) in held_values.into_iter().enumerate() {
            let inner = if schema[inner].is_enum {
                // A record: its kind names its variant.
                let kind = held_value["kind"].as_str().expect("a record's kind");
                schema[inner]
                    .members
                    .iter()
                    .find(|variant| snake_case(&variant.name) == kind)
                    .map(|variant| variant.ty.as_str())
                    .unwrap_or_else(|| panic!("{path}.{key}: no {inner} of kind {kind}"))
            } else {
                inner
            };
            check_keys(held_value, inner, schema, &format!("{path}.{key}[{at}]"));
        }
    }
}

#[test]
fn every_field_printed_is_declared_in_order() {
    let schema = schema();
    for (name, value) in crate::testkit::records::every_record() {
        check_keys(&value, name, &schema, name);
    }
}
