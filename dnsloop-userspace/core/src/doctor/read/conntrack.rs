//! conntrack's health from procfs: the per-CPU counters in `/proc/net/stat/nf_conntrack` (a
//! header of column names, then one row of hex numbers per CPU) and the table's fill.
use super::root::{NodeRoot, ReadFile, Unavailable};

pub const STAT: &str = "/proc/net/stat/nf_conntrack";
pub const COUNT: &str = "/proc/sys/net/netfilter/nf_conntrack_count";
pub const MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";

/// Counters since boot, summed over CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    pub cpus: usize,
    /// Entries that lost a race to be inserted: two packets of one new flow (a resolver's A
    /// and AAAA queries from one socket) on two CPUs at once.
    pub insert_failed: u64,
    /// Packets dropped because their entry could not be created (table full, lost race).
    pub drop: u64,
    /// Races the kernel resolved instead of dropping the packet (`clashres`, Linux 5.6 and
    /// later; `None` where the column is not there): the same race, survived.
    pub clashes_resolved: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct Conntrack {
    pub stats: ReadFile<Stats>,
    pub count: ReadFile<u64>,
    pub max: ReadFile<u64>,
}

pub fn read(root: &NodeRoot) -> Conntrack {
    Conntrack {
        stats: root
            .read(STAT)
            .map(|text| parse_stats(&text).map_err(Unavailable::Unreadable)),
        count: root.read(COUNT).map(parse_number),
        max: root.read(MAX).map(parse_number),
    }
}

fn parse_number(text: String) -> Result<u64, Unavailable> {
    text.trim()
        .parse()
        .map_err(|_| Unavailable::Unreadable(format!("{:?} is not a number", text.trim())))
}

/// Sums the `insert_failed`, `drop` and (where there is one) `clashres` columns, found by name:
/// the columns differ between kernels (`searched` became `clashres`, `delete_list` became
/// `chainlength`).
pub fn parse_stats(text: &str) -> Result<Stats, String> {
    let mut lines = text.lines().filter(|line| !line.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or("the file is empty")?
        .split_whitespace()
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|column| *column == name)
            .ok_or_else(|| format!("no {name} column in its header"))
    };
    let (insert_failed_column, drop_column) = (column("insert_failed")?, column("drop")?);
    let clashres_column = column("clashres").ok();
    let mut stats = Stats {
        cpus: 0,
        insert_failed: 0,
        drop: 0,
        clashes_resolved: clashres_column.map(|_| 0),
    };
    for (row, line) in lines.enumerate() {
        let values: Vec<&str> = line.split_whitespace().collect();
        let value = |column: usize| {
            values
                .get(column)
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                .ok_or_else(|| format!("row {} is not {} hex numbers", row + 1, header.len()))
        };
        stats.insert_failed = stats
            .insert_failed
            .saturating_add(value(insert_failed_column)?);
        stats.drop = stats.drop.saturating_add(value(drop_column)?);
        if let (Some(column), Some(sum)) = (clashres_column, &mut stats.clashes_resolved) {
            *sum = sum.saturating_add(value(column)?);
        }
        stats.cpus += 1;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL_6: &str = "\
entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
000003e8  00000004 00000000 00000000 0000001a 00000000 00000000 00000000 00000000 0000000c 00000003 00000000 00000000  00000000 00000000 00000000 00000000
000003e8  00000001 00000000 00000000 00000002 00000000 00000000 00000000 00000000 000000f0 00000000 00000000 00000000  00000000 00000000 00000000 00000000
";

    #[test]
    fn sums_the_columns_by_name_over_cpus() {
        assert_eq!(
            parse_stats(KERNEL_6).unwrap(),
            Stats {
                cpus: 2,
                insert_failed: 0xc + 0xf0,
                drop: 3,
                clashes_resolved: Some(5),
            }
        );
    }

    #[test]
    fn an_older_kernels_columns() {
        let old = "entries  searched found new invalid ignore delete delete_list insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n\
                   00000010  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000002 00000001 00000000 00000000  00000000 00000000 00000000 00000000\n";
        assert_eq!(
            parse_stats(old).unwrap(),
            Stats {
                cpus: 1,
                insert_failed: 2,
                drop: 1,
                clashes_resolved: None,
            }
        );
    }

    #[test]
    fn malformed_files_are_errors_not_guesses() {
        assert!(parse_stats("").is_err());
        assert!(parse_stats("entries found\n00000001 00000002\n").is_err());
        let short = "entries insert_failed drop\n00000001 00000002\n";
        assert!(parse_stats(short).unwrap_err().contains("row 1"));
        let junk = "entries insert_failed drop\n0000zzzz 00000002 00000003\n0 1\n";
        assert!(parse_stats(junk).is_err());
        // A header and no rows: no CPUs counted, nothing failed.
        assert_eq!(parse_stats("entries insert_failed drop\n").unwrap().cpus, 0);
    }

    #[test]
    fn huge_counters_saturate() {
        let text = "insert_failed drop\nffffffffffffffff 0\nffffffffffffffff 0\n";
        assert_eq!(parse_stats(text).unwrap().insert_failed, u64::MAX);
    }
}
