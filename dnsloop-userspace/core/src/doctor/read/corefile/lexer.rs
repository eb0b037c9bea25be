//! Corefile tokens, as CoreDNS's (Caddy's) lexer splits them: words separated by whitespace,
//! `"quoted words"` with `\"` escapes, `#` comments from the start of a word to the end of the
//! line. `{` and `}` are ordinary words that the parser gives meaning to.
use super::SyntaxError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub text: String,
    pub line: u32,
    /// Quoted words are never braces.
    pub quoted: bool,
}

impl Token {
    pub fn is_open(&self) -> bool {
        !self.quoted && self.text == "{"
    }

    pub fn is_close(&self) -> bool {
        !self.quoted && self.text == "}"
    }

    pub fn is_brace(&self) -> bool {
        self.is_open() || self.is_close()
    }
}

/// Splits `text`, numbering lines from `first_line`.
pub fn tokenize(text: &str, first_line: u32) -> Result<Vec<Token>, SyntaxError> {
    let mut tokens = Vec::new();
    let mut line = first_line;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line = line.saturating_add(1),
            c if c.is_whitespace() => {}
            '#' => while chars.next_if(|&c| c != '\n').is_some() {},
            '"' => {
                let start = line;
                let mut word = String::new();
                loop {
                    match chars.next() {
                        None => {
                            return Err(SyntaxError {
                                line: start,
                                message: "a quoted word is never closed (missing \")".into(),
                            })
                        }
                        Some('"') => break,
                        Some('\\') if chars.peek() == Some(&'"') => {
                            word.push('"');
                            chars.next();
                        }
                        Some(c) => {
                            if c == '\n' {
                                line = line.saturating_add(1);
                            }
                            word.push(c);
                        }
                    }
                }
                tokens.push(Token {
                    text: word,
                    line: start,
                    quoted: true,
                });
            }
            c => {
                let mut word = String::from(c);
                while let Some(c) = chars.next_if(|&c| !c.is_whitespace() && c != '"') {
                    word.push(c);
                }
                tokens.push(Token {
                    text: word,
                    line,
                    quoted: false,
                });
            }
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<(String, u32)> {
        tokenize(text, 1)
            .unwrap()
            .into_iter()
            .map(|token| (token.text, token.line))
            .collect()
    }

    #[test]
    fn words_comments_and_lines() {
        assert_eq!(
            words(".:53 {\n  forward . /etc/resolv.conf # upstream\n}\n"),
            [
                (".:53".into(), 1),
                ("{".into(), 1),
                ("forward".into(), 2),
                (".".into(), 2),
                ("/etc/resolv.conf".into(), 2),
                ("}".into(), 3),
            ]
        );
    }

    #[test]
    fn a_hash_inside_a_word_is_not_a_comment() {
        assert_eq!(words("a#b #c"), [("a#b".into(), 1)]);
    }

    #[test]
    fn quoted_words_keep_spaces_and_escapes_and_are_not_braces() {
        let tokens = tokenize("x \"a \\\"b\\\" {\" \"{\"", 1).unwrap();
        assert_eq!(tokens[1].text, "a \"b\" {");
        assert!(!tokens[2].is_open());
    }

    #[test]
    fn an_unclosed_quote_is_an_error_at_its_line() {
        let error = tokenize("a\nb \"c\nd", 1).unwrap_err();
        assert_eq!(error.line, 2);
    }

    #[test]
    fn crlf_tabs_and_the_first_line_number() {
        assert_eq!(
            words("a\r\n\tb\r\nc")
                .into_iter()
                .map(|(_, line)| line)
                .collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(tokenize("a\nb", 10).unwrap()[1].line, 11);
    }
}
