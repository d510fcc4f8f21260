//! The `tlb:tlb_flush` format file: where `reason` and `pages` sit in a raw
//! record, and the names of the reasons.

use std::collections::BTreeMap;

/// `enum tlb_flush_reason` (include/linux/mm_types.h) in the names used as
/// breakdown keys: the tracepoint's `__print_symbolic` strings, lower-cased,
/// with every run of non-alphanumerics replaced by `_`.
const KNOWN_REASONS: [(i64, &str); 6] = [
    (0, "flush_on_task_switch"),
    (1, "remote_shootdown"),
    (2, "local_shootdown"),
    (3, "local_mm_shootdown"),
    (4, "remote_ipi_send"),
    (5, "remote_wrong_cpu"),
];

/// Reasons emitted in the IRQ handler of another context's flush
/// (`flush_tlb_func` run for someone else's IPI), which perf charges to
/// whatever thread is current on the CPU: never the measured call's own
/// flush. Under load another process that once ran on the pinned CPU stays
/// in its `mm_cpumask`, and its page-table-freeing flushes IPI the CPU
/// while the measured call runs (`remote_wrong_cpu`); a compaction or
/// migration of the measured process's pages from another CPU does the same
/// (`remote_shootdown`).
const FOREIGN_REASONS: [&str; 2] = ["remote_shootdown", "remote_wrong_cpu"];

/// A field of the tracepoint's raw record, from its format file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Field {
    offset: usize,
    size: usize,
    signed: bool,
}

impl Field {
    /// The field's bits, zero-extended to 64 (`None` when `raw` is too short
    /// or the size is not 1, 2, 4 or 8).
    fn bits(&self, raw: &[u8]) -> Option<u64> {
        if !matches!(self.size, 1 | 2 | 4 | 8) {
            return None;
        }
        let bytes = raw.get(self.offset..self.offset.checked_add(self.size)?)?;
        let mut buf = [0u8; 8];
        buf[..self.size].copy_from_slice(bytes);
        let v = u64::from_ne_bytes(buf);
        #[cfg(target_endian = "big")]
        let v = v >> (64 - 8 * self.size);
        Some(v)
    }

    /// The value sign-extended per the format's `signed:` flag.
    fn signed_value(&self, raw: &[u8]) -> Option<i64> {
        let v = self.bits(raw)?;
        let shift = 64 - 8 * self.size as u32;
        Some(if self.signed {
            ((v << shift) as i64) >> shift
        } else {
            v as i64
        })
    }

    /// All bits of the field set (`TLB_FLUSH_ALL` = -1 stored in it).
    fn all_ones(&self) -> u64 {
        u64::MAX >> (64 - 8 * self.size as u32)
    }
}

/// What the format file says about `tlb:tlb_flush`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TlbFormat {
    pub(super) reason: Field,
    pub(super) pages: Field,
    /// Reason number -> key name; from `__print_symbolic` when present,
    /// else [`KNOWN_REASONS`].
    pub(super) reasons: BTreeMap<i64, String>,
}

impl TlbFormat {
    /// The reason numbers of [`FOREIGN_REASONS`] in this kernel's enum.
    fn foreign_numbers(&self) -> Vec<i64> {
        self.reasons
            .iter()
            .filter(|(_, name)| FOREIGN_REASONS.contains(&name.as_str()))
            .map(|(n, _)| *n)
            .collect()
    }

    /// The tracepoint filter that drops [`FOREIGN_REASONS`]
    /// (`reason != 1 && reason != 5`), or `None` when this kernel names
    /// none of them.
    pub(super) fn own_flushes_filter(&self) -> Option<String> {
        let clauses: Vec<String> = self
            .foreign_numbers()
            .iter()
            .map(|n| format!("reason != {n}"))
            .collect();
        (!clauses.is_empty()).then(|| clauses.join(" && "))
    }

    /// Whether a breakdown key (`"reason/pages"`) is of a foreign reason.
    pub(super) fn is_foreign_key(key: &str) -> bool {
        key.split('/')
            .next()
            .is_some_and(|r| FOREIGN_REASONS.contains(&r))
    }

    /// `"reason/pages"` for one raw record.
    pub(super) fn key(&self, raw: &[u8]) -> Option<String> {
        let reason = self.reason.signed_value(raw)?;
        let pages = self.pages.bits(raw)?;
        let name = match self.reasons.get(&reason) {
            Some(n) => n.clone(),
            None => format!("reason_{reason}"),
        };
        Some(if pages == self.pages.all_ones() {
            format!("{name}/all")
        } else {
            format!("{name}/{pages}")
        })
    }
}

/// Parse a tracepoint format file: the `reason` and `pages` fields and the
/// reason names.
pub(super) fn parse_format(text: &str) -> Result<TlbFormat, String> {
    let mut fields: BTreeMap<String, Field> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';').map(str::trim);
        let decl = parts.next().unwrap_or("");
        let mut offset = None;
        let mut size = None;
        let mut signed = false;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.trim().parse::<usize>().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.trim().parse::<usize>().ok();
            } else if let Some(v) = p.strip_prefix("signed:") {
                signed = v.trim() == "1";
            }
        }
        // The name is the declaration's last identifier (`unsigned long pages`,
        // `char comm[16]`).
        let decl = decl.split('[').next().unwrap_or(decl);
        let Some(name) = decl.split_whitespace().last() else {
            continue;
        };
        if let (Some(offset), Some(size)) = (offset, size) {
            fields.insert(
                name.trim_start_matches('*').to_string(),
                Field {
                    offset,
                    size,
                    signed,
                },
            );
        }
    }
    let field = |name: &str| -> Result<Field, String> {
        let f = *fields
            .get(name)
            .ok_or_else(|| format!("format has no field `{name}`"))?;
        if !matches!(f.size, 1 | 2 | 4 | 8) {
            return Err(format!("field `{name}` has unsupported size {}", f.size));
        }
        Ok(f)
    };
    let reason = field("reason")?;
    let pages = field("pages")?;
    let reasons = parse_print_symbolic(text, "REC->reason").unwrap_or_else(|| {
        KNOWN_REASONS
            .iter()
            .map(|&(n, s)| (n, s.to_string()))
            .collect()
    });
    Ok(TlbFormat {
        reason,
        pages,
        reasons,
    })
}

/// Lower-case, runs of non-alphanumerics to one `_`, no `_` at either end:
/// "local MM shootdown" -> "local_mm_shootdown".
fn normalize_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

/// The `{ value, "name" }` table of `__print_symbolic(<arg>, ...)` in the
/// print fmt, names normalized. `None` when absent or unparsable.
fn parse_print_symbolic(text: &str, arg: &str) -> Option<BTreeMap<i64, String>> {
    let start = text.find("__print_symbolic(")? + "__print_symbolic(".len();
    let rest = text[start..].trim_start();
    let rest = rest.strip_prefix(arg)?.trim_start().strip_prefix(',')?;
    let mut map = BTreeMap::new();
    let mut s = rest.trim_start();
    while let Some(body) = s.strip_prefix('{') {
        let (num, after) = body.split_once(',')?;
        let num = num.trim();
        let value = if let Some(hex) = num.strip_prefix("0x") {
            i64::from_str_radix(hex, 16).ok()?
        } else {
            num.parse::<i64>().ok()?
        };
        let after = after.trim_start().strip_prefix('"')?;
        let (name, after) = after.split_once('"')?;
        let after = after.trim_start().strip_prefix('}')?;
        map.insert(value, normalize_name(name));
        s = after.trim_start();
        match s.strip_prefix(',') {
            Some(next) => s = next.trim_start(),
            None => break,
        }
    }
    if map.is_empty() {
        None
    } else {
        Some(map)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The format file of this 6.18 kernel, verbatim.
    pub(in super::super) const FORMAT_6_18: &str = "name: tlb_flush
ID: 188
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:int reason;\toffset:8;\tsize:4;\tsigned:1;
\tfield:unsigned long pages;\toffset:16;\tsize:8;\tsigned:0;

print fmt: \"pages:%ld reason:%s (%d)\", REC->pages, __print_symbolic(REC->reason, { 0, \"flush on task switch\" }, { 1, \"remote shootdown\" }, { 2, \"local shootdown\" }, { 3, \"local MM shootdown\" }, { 4, \"remote IPI send\" }, { 5, \"remote wrong CPU\" }), REC->reason
";

    pub(in super::super) fn raw_record(fmt: &TlbFormat, reason: i32, pages: u64) -> Vec<u8> {
        let mut raw = vec![0u8; 28];
        raw[0..2].copy_from_slice(&188u16.to_ne_bytes());
        raw[fmt.reason.offset..fmt.reason.offset + 4].copy_from_slice(&reason.to_ne_bytes());
        raw[fmt.pages.offset..fmt.pages.offset + 8].copy_from_slice(&pages.to_ne_bytes());
        raw
    }

    #[test]
    fn parses_the_6_18_format() {
        let f = parse_format(FORMAT_6_18).unwrap();
        assert_eq!(
            f.reason,
            Field {
                offset: 8,
                size: 4,
                signed: true
            }
        );
        assert_eq!(
            f.pages,
            Field {
                offset: 16,
                size: 8,
                signed: false
            }
        );
        let names: Vec<&str> = f.reasons.values().map(String::as_str).collect();
        assert_eq!(
            names,
            KNOWN_REASONS.iter().map(|&(_, s)| s).collect::<Vec<_>>(),
            "the symbolic names normalize to the fallback names"
        );
    }

    #[test]
    fn falls_back_to_the_enum_without_print_symbolic() {
        let text = FORMAT_6_18.split("print fmt").next().unwrap().to_string()
            + "print fmt: \"pages:%ld reason:%d\", REC->pages, REC->reason\n";
        let f = parse_format(&text).unwrap();
        assert_eq!(
            f.reasons.get(&3).map(String::as_str),
            Some("local_mm_shootdown")
        );
        assert_eq!(f.reasons.len(), KNOWN_REASONS.len());
    }

    #[test]
    fn parses_older_names_and_other_offsets() {
        let text = "format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned long pages;\toffset:8;\tsize:8;\tsigned:0;
\tfield:int reason;\toffset:16;\tsize:4;\tsigned:1;

print fmt: \"pages:%ld reason:%s (%d)\", REC->pages, __print_symbolic(REC->reason, { 0, \"flush on task switch\" }, { 1, \"remote shootdown\" }, { 2, \"local shootdown\" }, { 3, \"local mm shootdown\" }, { 4, \"remote ipi send\" }), REC->reason
";
        let f = parse_format(text).unwrap();
        assert_eq!(f.pages.offset, 8);
        assert_eq!(f.reason.offset, 16);
        assert_eq!(f.reasons.len(), 5);
        assert_eq!(f.reasons[&4], "remote_ipi_send");
        let raw = raw_record(&f, 3, 7);
        assert_eq!(f.key(&raw).unwrap(), "local_mm_shootdown/7");
    }

    #[test]
    fn rejects_a_format_without_the_fields() {
        let err = parse_format("format:\n\tfield:int reason;\toffset:8;\tsize:4;\tsigned:1;\n")
            .unwrap_err();
        assert!(err.contains("pages"), "{err}");
    }

    #[test]
    fn keys_name_reason_and_pages() {
        let f = parse_format(FORMAT_6_18).unwrap();
        assert_eq!(
            f.key(&raw_record(&f, 3, 4)).unwrap(),
            "local_mm_shootdown/4"
        );
        assert_eq!(
            f.key(&raw_record(&f, 4, u64::MAX)).unwrap(),
            "remote_ipi_send/all"
        );
        assert_eq!(f.key(&raw_record(&f, 5, 0)).unwrap(), "remote_wrong_cpu/0");
        assert_eq!(f.key(&raw_record(&f, 9, 1)).unwrap(), "reason_9/1");
        assert_eq!(
            f.key(&raw_record(&f, 3, 4)[..20]),
            None,
            "truncated raw data"
        );
    }

    #[test]
    fn the_filter_drops_the_flushes_of_other_contexts() {
        let f = parse_format(FORMAT_6_18).unwrap();
        assert_eq!(
            f.own_flushes_filter().as_deref(),
            Some("reason != 1 && reason != 5")
        );
        assert!(TlbFormat::is_foreign_key("remote_wrong_cpu/0"));
        assert!(TlbFormat::is_foreign_key("remote_shootdown/all"));
        assert!(!TlbFormat::is_foreign_key("local_mm_shootdown/all"));
        assert!(!TlbFormat::is_foreign_key("remote_ipi_send/4"));
    }

    #[test]
    fn normalizes_names() {
        assert_eq!(normalize_name("local MM shootdown"), "local_mm_shootdown");
        assert_eq!(normalize_name(" remote IPI send "), "remote_ipi_send");
        assert_eq!(normalize_name("a--b"), "a_b");
    }
}
