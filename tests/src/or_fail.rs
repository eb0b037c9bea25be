//! [`OrFail`]: a test's way to stop at an error, saying what failed.
use std::fmt::Display;

/// Turns an error (or a `None`) into the test's failure, naming `what` was being done and the
/// caller's line rather than this one.
pub trait OrFail<T> {
    /// The value, or a panic with `what: error` (the error with its causes, as `{:#}` shows
    /// them).
    fn or_fail(self, what: impl Display) -> T;
}

impl<T, E: Display> OrFail<T> for Result<T, E> {
    #[track_caller]
    fn or_fail(self, what: impl Display) -> T {
        match self {
            Ok(value) => value,
            Err(error) => panic!("{what}: {error:#}"),
        }
    }
}

impl<T> OrFail<T> for Option<T> {
    #[track_caller]
    fn or_fail(self, what: impl Display) -> T {
        match self {
            Some(value) => value,
            None => panic!("{what}"),
        }
    }
}
