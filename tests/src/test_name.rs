//! [`test_name!`](crate::test_name): a test's name, as `cargo test` shows it, taken from the
//! function it is written in rather than typed in again.

/// The path of the test function this is written in, without its crate: `detect::tcp_loop`,
/// as `cargo test` lists it, for skip messages, failure messages and the files a test leaves.
/// Written in a closure, it names the function the closure is in.
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        $crate::test_name::enclosing_function(::std::any::type_name_of_val(&here))
    }};
}

/// `type_name` of a function nested in a test (`crate::area::test::here`, or
/// `crate::area::test::{{closure}}::here` from a closure) without its crate and its last part.
#[doc(hidden)]
pub fn enclosing_function(nested: &'static str) -> &'static str {
    let function = match nested.find("::{{closure}}") {
        Some(closure) => &nested[..closure],
        None => nested.rsplit_once("::").map_or(nested, |(outer, _)| outer),
    };
    function
        .split_once("::")
        .map_or(function, |(_crate, path)| path)
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_the_function_without_its_crate() {
        assert_eq!(
            crate::test_name!(),
            "test_name::tests::names_the_function_without_its_crate"
        );
        let from_a_closure = || crate::test_name!();
        assert_eq!(
            from_a_closure(),
            "test_name::tests::names_the_function_without_its_crate"
        );
    }
}
