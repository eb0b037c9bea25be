//! Naming kernel text addresses (`nf_hook_slow+0x9c`) from /proc/kallsyms, as the kernel's own
//! stack traces do.
//!
//! Only the addresses drops came from are named, each once, in one pass over kallsyms per batch
//! of new ones; the symbol table itself is never kept. Held whole it took about 9 MB (120,000
//! text symbols on a 6.18 kernel, each a name and an address), kept from the first drop for the
//! rest of the run, where drops come from a few places.
use std::{
    collections::HashMap,
    fs::File,
    io::{self, BufRead, BufReader},
    sync::Arc,
};

const KALLSYMS: &str = "/proc/kallsyms";

/// The names of the kernel text addresses learned so far.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// `None`: before the first symbol, or no symbol could be read (kallsyms unreadable, or
    /// `kernel.kptr_restrict` showing every address as 0 to a process without CAP_SYSLOG).
    named: HashMap<u64, Option<Arc<str>>>,
}

impl KernelSymbols {
    /// Names the `addresses` not named yet, in one pass over /proc/kallsyms.
    pub fn learn(&mut self, addresses: impl IntoIterator<Item = u64>) {
        let wanted = self.unnamed(addresses);
        if wanted.is_empty() {
            return;
        }
        let names = File::open(KALLSYMS)
            .and_then(|file| nearest_symbols(BufReader::new(file), &wanted))
            .unwrap_or_else(|error| {
                tracing::info!("reading {KALLSYMS}: {error}; drops are not located in the kernel");
                vec![None; wanted.len()]
            });
        self.named.extend(wanted.into_iter().zip(names));
    }

    /// `address` as the function holding it and the offset into it, once learned; `None` for
    /// an address not learned, before the first symbol, or when there are none.
    pub fn name(&self, address: u64) -> Option<Arc<str>> {
        self.named.get(&address).cloned().flatten()
    }

    /// Those of `addresses` not named yet, sorted, once each.
    fn unnamed(&self, addresses: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let mut wanted: Vec<u64> = addresses
            .into_iter()
            .filter(|address| *address != 0 && !self.named.contains_key(address))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        wanted
    }
}

/// For each of `wanted`, the text symbol holding it (the nearest at or below it) and the
/// offset into it, from kallsyms' lines (`ffffffff81a0c5d0 T nf_hook_slow`), in any order.
fn nearest_symbols(mut text: impl BufRead, wanted: &[u64]) -> io::Result<Vec<Option<Arc<str>>>> {
    let mut nearest: Vec<Option<(u64, String)>> = vec![None; wanted.len()];
    let mut line = String::new();
    while text.read_line(&mut line)? > 0 {
        let mut fields = line.split_ascii_whitespace();
        let symbol = (|| {
            let start = u64::from_str_radix(fields.next()?, 16).ok()?;
            let kind = fields.next()?;
            let name = fields.next()?;
            (start != 0 && matches!(kind, "T" | "t")).then_some((start, name))
        })();
        if let Some((start, name)) = symbol {
            for (address, best) in wanted.iter().zip(&mut nearest) {
                if start <= *address && best.as_ref().is_none_or(|(at, _)| *at < start) {
                    *best = Some((start, name.to_owned()));
                }
            }
        }
        line.clear();
    }
    Ok(wanted
        .iter()
        .zip(nearest)
        .map(|(address, best)| {
            best.map(|(start, name)| Arc::from(format!("{name}+{:#x}", address - start)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Not in address order, as module symbols are not.
    const KALLSYMS_SAMPLE: &str = "\
ffffffff81c00010 T __udp4_lib_rcv
ffffffff81a0c5d0 T nf_hook_slow
ffffffff81a0c700 t nf_hook_slow_list
ffffffff81a0c600 D some_data
0000000000000000 T hidden
";

    #[test]
    fn an_address_is_named_by_the_text_symbol_it_falls_in() {
        let wanted = [0x1000, 0xffff_ffff_81a0_c66c, 0xffff_ffff_81c0_0010];
        let names = nearest_symbols(KALLSYMS_SAMPLE.as_bytes(), &wanted).unwrap();
        assert_eq!(
            names.iter().map(Option::as_deref).collect::<Vec<_>>(),
            [None, Some("nf_hook_slow+0x9c"), Some("__udp4_lib_rcv+0x0")],
            "the first before every symbol; the second past a data symbol"
        );
    }

    #[test]
    fn hidden_symbols_name_nothing() {
        let names = nearest_symbols(
            "0000000000000000 T nf_hook_slow\n".as_bytes(),
            &[0xffff_ffff_81a0_c66c],
        );
        assert_eq!(names.unwrap(), [None]);
    }

    #[test]
    fn only_addresses_not_named_yet_are_looked_up_once_each() {
        let mut symbols = KernelSymbols::default();
        symbols
            .named
            .insert(0xffff_ffff_81a0_c66c, Some(Arc::from("nf_hook_slow+0x9c")));
        symbols.named.insert(0x1000, None);
        assert_eq!(
            symbols.unnamed([
                0xffff_ffff_81c0_0010,
                0,
                0x1000,
                0xffff_ffff_81a0_c66c,
                0x2000,
                0x2000
            ]),
            [0x2000, 0xffff_ffff_81c0_0010]
        );
        assert_eq!(
            symbols.name(0xffff_ffff_81a0_c66c).as_deref(),
            Some("nf_hook_slow+0x9c")
        );
        assert_eq!(symbols.name(0x1000), None);
    }
}
