//! Naming kernel text addresses (`nf_hook_slow+0x9c`) from /proc/kallsyms, as the kernel's own
//! stack traces do.
use std::{collections::HashMap, sync::Arc};

const KALLSYMS: &str = "/proc/kallsyms";

/// The kernel's text symbols, by address. Empty when they cannot be read or are hidden
/// (`kernel.kptr_restrict` shows every address as 0 to a process without CAP_SYSLOG).
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// Sorted by address.
    symbols: Vec<(u64, Arc<str>)>,
    /// Addresses named so far: drops come from a few places, over and over.
    named: HashMap<u64, Option<Arc<str>>>,
}

impl KernelSymbols {
    /// Reads /proc/kallsyms; none when it cannot be read.
    pub fn read() -> Self {
        match std::fs::read_to_string(KALLSYMS) {
            Ok(text) => Self::parse(&text),
            Err(error) => {
                tracing::info!("reading {KALLSYMS}: {error}; drops are not located in the kernel");
                Self::default()
            }
        }
    }

    /// From kallsyms' lines (`ffffffff81a0c5d0 T nf_hook_slow`), text symbols only.
    fn parse(text: &str) -> Self {
        let mut symbols: Vec<(u64, Arc<str>)> = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_ascii_whitespace();
                let address = u64::from_str_radix(fields.next()?, 16).ok()?;
                let kind = fields.next()?;
                let name = fields.next()?;
                (address != 0 && matches!(kind, "T" | "t")).then(|| (address, Arc::from(name)))
            })
            .collect();
        symbols.sort_unstable_by_key(|&(address, _)| address);
        Self {
            symbols,
            named: HashMap::new(),
        }
    }

    /// `address` as the function holding it and the offset into it; `None` for an address
    /// before the first symbol, or when there are none.
    pub fn name(&mut self, address: u64) -> Option<Arc<str>> {
        if address == 0 {
            return None;
        }
        if let Some(named) = self.named.get(&address) {
            return named.clone();
        }
        let index = self.symbols.partition_point(|&(start, _)| start <= address);
        let named = index.checked_sub(1).map(|index| {
            let (start, name) = &self.symbols[index];
            Arc::from(format!("{name}+{:#x}", address - start))
        });
        // Bounded by the kernel's text: every address is one a drop came from.
        self.named.insert(address, named.clone());
        named
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS_SAMPLE: &str = "\
ffffffff81a0c5d0 T nf_hook_slow
ffffffff81a0c700 t nf_hook_slow_list
ffffffff81b00000 D some_data
ffffffff81c00010 T __udp4_lib_rcv
0000000000000000 T hidden
";

    #[test]
    fn an_address_is_named_by_the_function_it_falls_in() {
        let mut symbols = KernelSymbols::parse(KALLSYMS_SAMPLE);
        assert_eq!(
            symbols.name(0xffff_ffff_81a0_c66c).as_deref(),
            Some("nf_hook_slow+0x9c")
        );
        assert_eq!(
            symbols.name(0xffff_ffff_81c0_0010).as_deref(),
            Some("__udp4_lib_rcv+0x0")
        );
        assert_eq!(symbols.name(0x1000), None, "before the first symbol");
        assert_eq!(symbols.name(0), None);
    }

    #[test]
    fn hidden_symbols_name_nothing() {
        let mut symbols = KernelSymbols::parse("0000000000000000 T nf_hook_slow\n");
        assert_eq!(symbols.name(0xffff_ffff_81a0_c66c), None);
    }
}
