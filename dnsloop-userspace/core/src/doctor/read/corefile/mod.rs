//! Corefiles: server blocks `[scheme://]zone[:port] ... { directives }`, directives with
//! nested blocks (`forward . /etc/resolv.conf { force_tcp }`), snippets `(name) { ... }`
//! pulled in by `import name`, and the one thing a loop check needs from each plugin: where
//! `forward` (and `proxy`, its predecessor before CoreDNS 1.6) sends queries, what `bind`
//! listens on, whether `loop` is there.
mod configmap;
mod lexer;

use std::{
    collections::HashMap,
    fmt,
    net::{IpAddr, SocketAddr},
};

pub use self::configmap::{load, LoadError};
use self::lexer::{tokenize, Token};
use crate::doctor::address;

/// `import` chains deeper than this are cut (a snippet importing itself would never end).
const MAX_IMPORT_DEPTH: usize = 10;

/// Blocks nested deeper than this are refused: real Corefiles nest two deep, and the parser
/// recurses once per level.
const MAX_NESTING: usize = 32;

/// A Corefile doctor was given.
#[derive(Clone, Debug)]
pub struct Corefile {
    /// How reports name it: the file as given, plus `(data.Corefile)` when the Corefile's
    /// lines could not be matched to the ConfigMap file's lines.
    pub name: String,
    /// The server blocks, or why CoreDNS would refuse the file.
    pub servers: Result<Vec<ServerBlock>, SyntaxError>,
    /// `__PILLAR__...` words left from node-local-dns's manifest template, with their line.
    pub placeholders: Vec<(String, u32)>,
}

impl Corefile {
    /// Parses `text`, numbering its lines from `first_line` (a Corefile inside a ConfigMap file
    /// starts below the file's first line).
    pub fn parse(name: String, text: &str, first_line: u32) -> Self {
        let tokens = tokenize(text, first_line);
        let placeholders = tokens
            .as_ref()
            .map(|tokens| placeholders(tokens))
            .unwrap_or_default();
        let servers = tokens.and_then(|tokens| Parser::new(&tokens).file());
        Self {
            name,
            servers,
            placeholders,
        }
    }

    pub fn server_blocks(&self) -> &[ServerBlock] {
        self.servers.as_deref().unwrap_or_default()
    }

    /// The line of the first `bind` that listens on `address`, if one does.
    pub fn bind_line(&self, address: IpAddr) -> Option<u32> {
        self.server_blocks()
            .iter()
            .flat_map(ServerBlock::binds)
            .find(|bind| bind.address == Some(address))
            .map(|bind| bind.line)
    }

    /// node-local-dns's Corefile binds a link-local address, or still holds the template words
    /// that only node-cache fills in; CoreDNS's does neither.
    pub fn is_node_local_dns(&self) -> bool {
        let binds_link_local = self.server_blocks().iter().any(|server| {
            server.binds().iter().any(|bind| match bind.address {
                Some(address) => address::is_link_local(address),
                None => bind.text.contains("__PILLAR__LOCAL__DNS__"),
            })
        });
        binds_link_local
            || self.placeholders.iter().any(|(name, _)| {
                name == "__PILLAR__CLUSTER__DNS__" || name == "__PILLAR__UPSTREAM__SERVERS__"
            })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    pub line: u32,
    pub message: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerBlock {
    pub keys: Vec<ServerKey>,
    pub line: u32,
    pub directives: Vec<Directive>,
}

/// One of a server block's keys: `.:53`, `cluster.local:53`, `tls://.:853`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerKey {
    pub text: String,
    pub zone: String,
    /// None when the port is not a number (`{$PORT}`).
    pub port: Option<u16>,
}

impl ServerKey {
    fn parse(text: &str) -> Self {
        let (scheme, rest) = text.split_once("://").unwrap_or(("dns", text));
        let default_port = match scheme {
            "tls" | "quic" => 853,
            "grpc" | "https" | "https3" => 443,
            _ => 53,
        };
        let (zone, port) = match rest.rsplit_once(':') {
            Some((zone, port)) => (zone, port.parse().ok()),
            None => (rest, Some(default_port)),
        };
        Self {
            text: text.to_string(),
            zone: zone.to_string(),
            port,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directive {
    pub name: String,
    pub args: Vec<String>,
    pub line: u32,
}

/// An address `bind` listens on; interface names (`bind eth0`) have none doctor can know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub text: String,
    pub address: Option<IpAddr>,
    pub line: u32,
}

/// `forward FROM TO...` (or `proxy FROM TO...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forward {
    pub plugin: String,
    pub from: String,
    pub targets: Vec<Target>,
    pub line: u32,
}

impl Forward {
    /// `forward . 10.96.0.10 /etc/resolv.conf`, as written.
    pub fn describe(&self) -> String {
        let mut text = format!("{} {}", self.plugin, self.from);
        for target in &self.targets {
            text.push(' ');
            text.push_str(target.text());
        }
        text
    }
}

/// Where a forward sends queries, as CoreDNS reads its `TO` words: an address with an optional
/// port and `dns://`/`tls://` scheme, or else a resolv.conf-style file read inside the server's
/// container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Address {
        text: String,
        address: SocketAddr,
    },
    File(String),
    /// Not an address and not a path: an unrendered placeholder, an environment variable.
    Other(String),
}

impl Target {
    fn parse(text: &str) -> Self {
        let (port, rest) = if let Some(rest) = text.strip_prefix("tls://") {
            (853, rest)
        } else {
            (53, text.strip_prefix("dns://").unwrap_or(text))
        };
        if let Ok(address) = rest.parse::<SocketAddr>() {
            return Self::Address {
                text: text.to_string(),
                address,
            };
        }
        if let Some(ip) = address::parse(rest.trim_start_matches('[').trim_end_matches(']')) {
            return Self::Address {
                text: text.to_string(),
                address: SocketAddr::new(ip, port),
            };
        }
        if rest.contains('/') {
            Self::File(text.to_string())
        } else {
            Self::Other(text.to_string())
        }
    }

    pub fn text(&self) -> &str {
        match self {
            Self::Address { text, .. } | Self::File(text) | Self::Other(text) => text,
        }
    }
}

impl ServerBlock {
    /// The keys as written: `cluster.local:53 in-addr.arpa:53`.
    pub fn label(&self) -> String {
        self.keys
            .iter()
            .map(|key| key.text.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The port it listens on (its first key's).
    pub fn port(&self) -> Option<u16> {
        self.keys.first().and_then(|key| key.port)
    }

    pub fn has_plugin(&self, name: &str) -> bool {
        self.directives
            .iter()
            .any(|directive| directive.name == name)
    }

    pub fn binds(&self) -> Vec<Bind> {
        self.directives
            .iter()
            .filter(|directive| directive.name == "bind")
            .flat_map(|directive| {
                directive.args.iter().map(|text| Bind {
                    text: text.clone(),
                    address: address::parse(text),
                    line: directive.line,
                })
            })
            .collect()
    }

    pub fn forwards(&self) -> Vec<Forward> {
        self.directives
            .iter()
            .filter(|directive| directive.name == "forward" || directive.name == "proxy")
            .filter_map(|directive| {
                let (from, targets) = directive.args.split_first()?;
                Some(Forward {
                    plugin: directive.name.clone(),
                    from: from.clone(),
                    targets: targets.iter().map(|text| Target::parse(text)).collect(),
                    line: directive.line,
                })
            })
            .collect()
    }
}

fn placeholders(tokens: &[Token]) -> Vec<(String, u32)> {
    let mut found: Vec<(String, u32)> = Vec::new();
    for token in tokens {
        let mut rest = token.text.as_str();
        while let Some(start) = rest.find("__PILLAR__") {
            let after = &rest[start + "__PILLAR__".len()..];
            // A placeholder's name is capitals and underscores: `__PILLAR__DNS__SERVER__`
            // ends at the `:` of `__PILLAR__DNS__SERVER__:53`.
            let name_len = after
                .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                .unwrap_or(after.len());
            let name = format!("__PILLAR__{}", &after[..name_len]);
            if !found.iter().any(|(known, _)| *known == name) {
                found.push((name, token.line));
            }
            rest = &after[name_len..];
        }
    }
    found
}

struct Parser<'t> {
    tokens: &'t [Token],
    next: usize,
    /// Blocks open around the parser's position.
    depth: usize,
}

impl<'t> Parser<'t> {
    fn new(tokens: &'t [Token]) -> Self {
        Self {
            tokens,
            next: 0,
            depth: 0,
        }
    }

    fn peek(&self) -> Option<&'t Token> {
        self.tokens.get(self.next)
    }

    fn advance(&mut self) -> Option<&'t Token> {
        let token = self.tokens.get(self.next)?;
        self.next += 1;
        Some(token)
    }

    fn file(mut self) -> Result<Vec<ServerBlock>, SyntaxError> {
        let mut servers = Vec::new();
        let mut snippets: HashMap<String, Vec<Directive>> = HashMap::new();
        while let Some(first) = self.peek() {
            if first.is_brace() {
                return Err(SyntaxError {
                    line: first.line,
                    message: format!("`{}` where a server block's zone should be", first.text),
                });
            }
            let keys = self.keys();
            // `import FILE` at the top level pulls in files doctor does not have.
            if keys.first().is_some_and(|key| key == "import") {
                continue;
            }
            let directives = match self.peek() {
                Some(open) if open.is_open() => {
                    self.advance();
                    self.block(open.line)?
                }
                // Caddy lets a file with a single server block leave out the braces.
                _ if servers.is_empty() && snippets.is_empty() => self.rest_of_file()?,
                other => {
                    return Err(SyntaxError {
                        line: other.map_or(first.line, |token| token.line),
                        message: format!("server block `{}` has no `{{`", keys.join(" ")),
                    })
                }
            };
            if let Some(name) = keys
                .first()
                .and_then(|key| key.strip_prefix('('))
                .and_then(|key| key.strip_suffix(')'))
            {
                snippets.insert(name.to_string(), directives);
            } else {
                servers.push((keys, first.line, directives));
            }
        }
        Ok(servers
            .into_iter()
            .map(|(keys, line, directives)| ServerBlock {
                keys: keys.iter().map(|key| ServerKey::parse(key)).collect(),
                line,
                directives: expand_imports(directives, &snippets, 0),
            })
            .collect())
    }

    /// A server block's keys: the words on its first line, and on following lines while a line
    /// ends with a comma (`a.example:53,\n b.example:53`).
    fn keys(&mut self) -> Vec<String> {
        let mut keys = Vec::new();
        let mut line = match self.peek() {
            Some(token) => token.line,
            None => return keys,
        };
        while let Some(token) = self.peek() {
            if token.is_open() || token.line != line {
                break;
            }
            self.advance();
            keys.extend(
                token
                    .text
                    .split(',')
                    .filter(|key| !key.is_empty())
                    .map(String::from),
            );
            if token.text.ends_with(',') {
                line = self.peek().map_or(line, |next| next.line);
            }
        }
        keys
    }

    /// Directives up to the `}` that closes a block opened at `opened`.
    fn block(&mut self, opened: u32) -> Result<Vec<Directive>, SyntaxError> {
        if self.depth == MAX_NESTING {
            return Err(SyntaxError {
                line: opened,
                message: format!("blocks nested more than {MAX_NESTING} deep"),
            });
        }
        self.depth += 1;
        let directives = self.directives_until_close(opened);
        self.depth -= 1;
        directives
    }

    fn directives_until_close(&mut self, opened: u32) -> Result<Vec<Directive>, SyntaxError> {
        let mut directives = Vec::new();
        loop {
            match self.peek() {
                None => {
                    return Err(SyntaxError {
                        line: opened,
                        message: "a `{` is never closed".into(),
                    })
                }
                Some(token) if token.is_close() => {
                    self.advance();
                    return Ok(directives);
                }
                Some(token) => {
                    self.advance();
                    directives.push(self.directive(token)?);
                }
            }
        }
    }

    fn rest_of_file(&mut self) -> Result<Vec<Directive>, SyntaxError> {
        let mut directives = Vec::new();
        while let Some(token) = self.peek() {
            if token.is_close() {
                return Err(SyntaxError {
                    line: token.line,
                    message: "a `}` closes nothing".into(),
                });
            }
            self.advance();
            directives.push(self.directive(token)?);
        }
        Ok(directives)
    }

    /// A directive named by `name` (already consumed): the words after it on its line, and the
    /// `{ ... }` that opens on the same line, if one does.
    fn directive(&mut self, name: &'t Token) -> Result<Directive, SyntaxError> {
        if name.is_open() {
            return Err(SyntaxError {
                line: name.line,
                message: "a `{` that belongs to no directive".into(),
            });
        }
        let mut args = Vec::new();
        while let Some(token) = self.peek() {
            if token.line != name.line || token.is_close() {
                break;
            }
            self.advance();
            if token.is_open() {
                // A plugin's own options (`force_tcp`, `max_concurrent`): parsed for their
                // braces, and not needed by any check.
                self.block(token.line)?;
                break;
            }
            args.push(token.text.clone());
        }
        Ok(Directive {
            name: name.text.clone(),
            args,
            line: name.line,
        })
    }
}

/// Replaces `import SNIPPET` with the snippet's directives (imports of files stay as they are:
/// doctor does not have those files).
fn expand_imports(
    directives: Vec<Directive>,
    snippets: &HashMap<String, Vec<Directive>>,
    depth: usize,
) -> Vec<Directive> {
    let mut expanded = Vec::with_capacity(directives.len());
    for directive in directives {
        let snippet = (directive.name == "import" && depth < MAX_IMPORT_DEPTH)
            .then(|| directive.args.first().and_then(|name| snippets.get(name)))
            .flatten();
        match snippet {
            Some(body) => expanded.extend(expand_imports(body.clone(), snippets, depth + 1)),
            None => expanded.push(directive),
        }
    }
    expanded
}

#[cfg(test)]
mod tests;
