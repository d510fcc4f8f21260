//! The answer a guest sends back on its console: the captured stdout of the
//! command it ran, its exit code and the guest's kernel release, framed so the
//! host can find it among kernel messages and verify it.
//!
//! ```text
//! PTELAB-ANSWER-BEGIN v1 len=1234 exit=0 lines=2 release=6.17.13+deb13-cloud-amd64 sha256=HEX
//! PTELAB-ANSWER 0 BASE64…
//! PTELAB-ANSWER 1 BASE64…
//! PTELAB-ANSWER-END sha256=HEX
//! ```
//!
//! The console is shared with the kernel, so whole lines of kernel messages
//! may sit between frame lines (skipped) and the serial line ends lines with
//! `\r\n`. A guest is untrusted: everything is parsed with size limits, the
//! line count, length and sha256 must agree, and any mismatch is a
//! [`FrameError`], never a panic.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};

const BEGIN: &str = "PTELAB-ANSWER-BEGIN v1 ";
const DATA: &str = "PTELAB-ANSWER ";
const END: &str = "PTELAB-ANSWER-END ";

/// A second channel in the same format, sent before the answer: the
/// guest kernel's symbols for `vm --profile` (deflated text; see
/// `guest::boot::profile`).
pub const SYMBOLS: Channel = Channel {
    begin: "PTELAB-SYMBOLS-BEGIN v1 ",
    data: "PTELAB-SYMBOLS ",
    end: "PTELAB-SYMBOLS-END ",
};
/// The answer's channel.
const ANSWER: Channel = Channel {
    begin: BEGIN,
    data: DATA,
    end: END,
};

/// The three line prefixes of one kind of frame.
#[derive(Clone, Copy, Debug)]
pub struct Channel {
    begin: &'static str,
    data: &'static str,
    end: &'static str,
}
/// Bytes of stdout per data line (1024 base64 characters).
const CHUNK: usize = 768;
/// The longest kernel release accepted from a guest.
const MAX_RELEASE: usize = 128;

/// A verified answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub stdout: Vec<u8>,
    pub exit_code: i32,
    /// `uname -r` in the guest.
    pub release: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// No begin line: the guest never got to answering.
    Missing,
    /// The begin line announces more than the host accepts.
    Oversized { len: u64, limit: u64 },
    /// The console ended before the end line (lines received of lines announced).
    Truncated { got: usize, want: usize },
    /// A line is not what the frame format allows.
    Malformed(String),
    /// The decoded bytes do not hash to the announced sha256.
    Checksum,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Missing => write!(f, "the guest sent no answer"),
            FrameError::Oversized { len, limit } => {
                write!(
                    f,
                    "the guest's answer announces {len} bytes, more than the {limit} accepted"
                )
            }
            FrameError::Truncated { got, want } => {
                write!(f, "the guest's answer is truncated ({got} of {want} lines)")
            }
            FrameError::Malformed(why) => write!(f, "the guest's answer is malformed: {why}"),
            FrameError::Checksum => write!(f, "the guest's answer fails its sha256 check"),
        }
    }
}

impl std::error::Error for FrameError {}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The frame for `stdout` (guest side). Starts with a newline so the begin
/// line never continues a line the console had left open.
pub fn encode(stdout: &[u8], exit_code: i32, release: &str) -> Vec<u8> {
    ANSWER.encode(stdout, exit_code, release)
}

impl Channel {
    /// The frame of `stdout` on this channel.
    pub fn encode(&self, stdout: &[u8], exit_code: i32, release: &str) -> Vec<u8> {
        let Channel {
            begin,
            data: data_prefix,
            end,
        } = *self;
        let sum = hex(&Sha256::digest(stdout));
        let lines = stdout.len().div_ceil(CHUNK);
        let release: String = release
            .chars()
            .filter(|c| c.is_ascii_graphic())
            .take(MAX_RELEASE)
            .collect();
        let release = if release.is_empty() {
            "unknown".to_string()
        } else {
            release
        };
        let mut out = format!(
            "\n{begin}len={} exit={exit_code} lines={lines} release={release} sha256={sum}\n",
            stdout.len()
        )
        .into_bytes();
        for (i, chunk) in stdout.chunks(CHUNK).enumerate() {
            out.extend_from_slice(
                format!("{data_prefix}{i} {}\n", STANDARD.encode(chunk)).as_bytes(),
            );
        }
        out.extend_from_slice(format!("{end}sha256={sum}\n").as_bytes());
        out
    }
}

/// The frame of a command that printed more than the guest may send: only
/// the begin line with the length seen (which the host refuses as
/// oversized before reading on) and the end line.
pub fn encode_oversized(seen: u64, exit_code: i32, release: &str) -> Vec<u8> {
    let zero = "0".repeat(64);
    let lines = seen.div_ceil(CHUNK as u64);
    let release = if release.is_empty() {
        "unknown"
    } else {
        release
    };
    let release: String = release
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(MAX_RELEASE)
        .collect();
    format!("\n{BEGIN}len={seen} exit={exit_code} lines={lines} release={release} sha256={zero}\n{END}sha256={zero}\n")
        .into_bytes()
}

/// One command's part of the answer of a boot that ran several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepAnswer {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
}

/// Starts each command's part of a bundle: `PTELAB-STEP exit=E len=N`, a
/// newline, then the N bytes of its stdout.
const STEP: &str = "PTELAB-STEP ";

/// The stdout of a boot's commands as one answer (guest side); the frame
/// around it checks the whole.
pub fn bundle(steps: &[StepAnswer]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in steps {
        out.extend_from_slice(
            format!("{STEP}exit={} len={}\n", s.exit_code, s.stdout.len()).as_bytes(),
        );
        out.extend_from_slice(&s.stdout);
    }
    out
}

/// Split a bundle of `steps` commands (host side).
pub fn unbundle(mut bytes: &[u8], steps: usize) -> Result<Vec<StepAnswer>, FrameError> {
    let bad = |why: String| FrameError::Malformed(format!("bundle: {why}"));
    let mut out = Vec::with_capacity(steps);
    for k in 0..steps {
        let nl = bytes
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| bad(format!("command {k} has no header")))?;
        let head = std::str::from_utf8(&bytes[..nl]).map_err(|_| bad("header not UTF-8".into()))?;
        let rest = head
            .strip_prefix(STEP)
            .ok_or_else(|| bad(format!("command {k}'s header is '{head}'")))?;
        let field = |name: &str| {
            rest.split(' ')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .ok_or_else(|| bad(format!("command {k}'s header has no {name}")))
        };
        let exit_code: i32 = field("exit")?
            .parse()
            .map_err(|_| bad("exit is not a number".into()))?;
        let len: usize = field("len")?
            .parse()
            .map_err(|_| bad("len is not a number".into()))?;
        let body = &bytes[nl + 1..];
        if len > body.len() {
            return Err(bad(format!(
                "command {k} announces {len} bytes, {} left",
                body.len()
            )));
        }
        out.push(StepAnswer {
            exit_code,
            stdout: body[..len].to_vec(),
        });
        bytes = &body[len..];
    }
    if !bytes.is_empty() {
        return Err(bad(format!(
            "{} bytes after the {steps} commands",
            bytes.len()
        )));
    }
    Ok(out)
}

/// Console bytes a frame of `len` stdout bytes takes at most, for the
/// host's cap on what it keeps of a console.
pub fn encoded_len(len: u64) -> u64 {
    let lines = len.div_ceil(CHUNK as u64);
    len.div_ceil(3) * 4 + lines * (DATA.len() as u64 + 24) + 512
}

/// True when `console` holds an end line (the guest finished answering).
pub fn has_end(console: &[u8]) -> bool {
    console.windows(END.len()).any(|w| w == END.as_bytes())
}

struct Header {
    len: u64,
    exit_code: i32,
    lines: usize,
    release: String,
    sha256: String,
}

fn parse_header(rest: &str, limit: u64) -> Result<Header, FrameError> {
    let bad = |why: &str| FrameError::Malformed(format!("begin line: {why}"));
    let mut fields = std::collections::BTreeMap::new();
    for kv in rest.split(' ').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| bad("a field without '='"))?;
        if fields.insert(k, v).is_some() {
            return Err(bad(&format!("field {k} twice")));
        }
    }
    let field = |k: &str| {
        fields
            .get(k)
            .copied()
            .ok_or_else(|| bad(&format!("no {k}")))
    };
    let len: u64 = field("len")?
        .parse()
        .map_err(|_| bad("len is not a number"))?;
    if len > limit {
        return Err(FrameError::Oversized { len, limit });
    }
    let exit_code: i32 = field("exit")?
        .parse()
        .map_err(|_| bad("exit is not a number"))?;
    let lines: usize = field("lines")?
        .parse()
        .map_err(|_| bad("lines is not a number"))?;
    if lines as u64 != len.div_ceil(CHUNK as u64) {
        return Err(bad("lines does not match len"));
    }
    let release = field("release")?;
    if release.len() > MAX_RELEASE {
        return Err(bad("release too long"));
    }
    let sha256 = field("sha256")?;
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad("sha256 is not 64 hex digits"));
    }
    Ok(Header {
        len,
        exit_code,
        lines,
        release: release.to_string(),
        sha256: sha256.to_ascii_lowercase(),
    })
}

/// Find and verify the last answer in `console` (host side). `limit` caps
/// the announced stdout length before anything is decoded.
pub fn decode(console: &[u8], limit: u64) -> Result<Answer, FrameError> {
    ANSWER.decode(console, limit)
}

impl Channel {
    /// Find and verify the last frame of this channel in `console`.
    pub fn decode(&self, console: &[u8], limit: u64) -> Result<Answer, FrameError> {
        let Channel {
            begin,
            data: data_prefix,
            end,
        } = *self;
        let text = String::from_utf8_lossy(console);
        let mut lines: Vec<&str> = text.split('\n').map(|l| l.trim_end_matches('\r')).collect();
        // What follows the last newline is a line still being written.
        lines.pop();
        // The last begin line: a command's own stderr on the console could show
        // one earlier, the guest's init writes the real one last.
        let Some((at, rest)) = lines
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, l)| l.find(begin).map(|p| (i, &l[p + begin.len()..])))
        else {
            return Err(FrameError::Missing);
        };
        let h = parse_header(rest, limit)?;
        let mut stdout = Vec::with_capacity(h.len as usize);
        let mut next = 0usize;
        for line in &lines[at + 1..] {
            if let Some(p) = line.find(end) {
                if next != h.lines {
                    return Err(FrameError::Truncated {
                        got: next,
                        want: h.lines,
                    });
                }
                let sum = line[p + end.len()..]
                    .trim()
                    .strip_prefix("sha256=")
                    .unwrap_or("");
                if !sum.eq_ignore_ascii_case(&h.sha256) {
                    return Err(FrameError::Malformed(
                        "end line's sha256 differs from the begin line's".into(),
                    ));
                }
                if stdout.len() as u64 != h.len {
                    return Err(FrameError::Malformed(format!(
                        "{} bytes decoded, {} announced",
                        stdout.len(),
                        h.len
                    )));
                }
                if hex(&Sha256::digest(&stdout)) != h.sha256 {
                    return Err(FrameError::Checksum);
                }
                return Ok(Answer {
                    stdout,
                    exit_code: h.exit_code,
                    release: h.release,
                });
            }
            // Other lines are kernel messages between frame lines.
            let Some(p) = line.find(data_prefix) else {
                continue;
            };
            let (idx, data) = line[p + data_prefix.len()..]
                .split_once(' ')
                .ok_or_else(|| FrameError::Malformed(format!("data line {next} has no payload")))?;
            if idx.parse::<usize>().ok() != Some(next) {
                return Err(FrameError::Malformed(format!(
                    "data line {next} missing (found '{}')",
                    trunc(idx)
                )));
            }
            if next >= h.lines || data.len() > CHUNK.div_ceil(3) * 4 {
                return Err(FrameError::Malformed(format!(
                    "data line {next} is too long or one too many"
                )));
            }
            let bytes = STANDARD
                .decode(data.trim())
                .map_err(|e| FrameError::Malformed(format!("data line {next}: {e}")))?;
            if stdout.len() + bytes.len() > h.len as usize {
                return Err(FrameError::Malformed("more bytes than announced".into()));
            }
            stdout.extend_from_slice(&bytes);
            next += 1;
        }
        Err(FrameError::Truncated {
            got: next,
            want: h.lines,
        })
    }
}

fn trunc(s: &str) -> &str {
    match s.char_indices().nth(20) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_splits_back_into_its_commands_and_a_bad_one_is_refused() {
        let steps = vec![
            StepAnswer {
                exit_code: 0,
                stdout: b"{\"a\": 1}\nPTELAB-STEP exit=9 len=1\n".to_vec(),
            },
            StepAnswer {
                exit_code: 137,
                stdout: Vec::new(),
            },
            StepAnswer {
                exit_code: 2,
                stdout: vec![0, 255, b'\n'],
            },
        ];
        let b = bundle(&steps);
        assert_eq!(unbundle(&b, 3).unwrap(), steps);
        // Wrapped in a frame and back, as the console carries it.
        let framed = encode(&b, 0, "7.1.3");
        assert_eq!(
            unbundle(&decode(&framed, 1 << 20).unwrap().stdout, 3).unwrap(),
            steps
        );
        for (bytes, n) in [
            (&b[..b.len() - 1], 3),
            (&b[..], 2),
            (&b[..], 4),
            (&b"PTELAB-STEP exit=x len=0\n"[..], 1),
            (&b"PTELAB-STEP len=0\n"[..], 1),
            (&b"garbage\n"[..], 1),
        ] {
            let e = unbundle(bytes, n).unwrap_err();
            assert!(matches!(e, FrameError::Malformed(_)), "{e}");
        }
    }

    const LIMIT: u64 = 64 << 20;

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn round_trip_sizes() {
        for n in [0, 1, 767, 768, 769, 5000] {
            let p = payload(n);
            let a = decode(&encode(&p, 3, "6.17.13+deb13-cloud-amd64"), LIMIT).unwrap();
            assert_eq!(a.stdout, p, "n={n}");
            assert_eq!(a.exit_code, 3);
            assert_eq!(a.release, "6.17.13+deb13-cloud-amd64");
            assert!(encode(&p, 0, "r").len() as u64 <= encoded_len(n as u64));
        }
    }

    #[test]
    fn kernel_lines_around_and_between_and_crlf() {
        let p = payload(3000);
        let frame = String::from_utf8(encode(&p, 0, "r")).unwrap();
        let mut console = String::from("[    0.000000] Linux version 6.17\r\nboot noise");
        for (i, l) in frame.lines().enumerate() {
            console.push_str(l);
            console.push_str("\r\n");
            if i % 2 == 1 {
                console.push_str("[   12.345678] random: crng init done\r\n");
            }
        }
        console.push_str("[   13.0] reboot: Restarting system\r\n");
        assert_eq!(decode(console.as_bytes(), LIMIT).unwrap().stdout, p);
    }

    #[test]
    fn last_answer_wins() {
        let mut c = encode(b"fake", 0, "r");
        c.extend(encode(b"real", 1, "r"));
        let a = decode(&c, LIMIT).unwrap();
        assert_eq!((a.stdout.as_slice(), a.exit_code), (&b"real"[..], 1));
    }

    #[test]
    fn missing_truncated_oversized() {
        assert_eq!(
            decode(b"Kernel panic - not syncing\n", LIMIT),
            Err(FrameError::Missing)
        );
        let f = encode(&payload(2000), 0, "r");
        let cut = &f[..f.len() - 200];
        assert!(
            matches!(
                decode(cut, LIMIT),
                Err(FrameError::Truncated { want: 3, .. })
            ),
            "{:?}",
            decode(cut, LIMIT)
        );
        assert_eq!(
            decode(&f, 1000),
            Err(FrameError::Oversized {
                len: 2000,
                limit: 1000
            })
        );
        // A hostile header cannot make the host allocate: refused before decoding.
        let huge = format!(
            "{BEGIN}len={} exit=0 lines=1 release=r sha256={}\n",
            u64::MAX,
            "0".repeat(64)
        );
        assert!(matches!(
            decode(huge.as_bytes(), LIMIT),
            Err(FrameError::Oversized { .. })
        ));
    }

    #[test]
    fn bad_checksum_and_malformed() {
        let f = String::from_utf8(encode(b"{\"ok\":true}", 0, "r")).unwrap();
        // Same length, one payload byte changed (the base64 of 'true' -> 'trUe').
        let data = f.lines().find(|l| l.starts_with(DATA)).unwrap();
        let tampered_data = format!("{DATA}0 {}", STANDARD.encode(b"{\"ok\":trUe}"));
        let bad = f.replace(data, &tampered_data);
        assert_eq!(decode(bad.as_bytes(), LIMIT), Err(FrameError::Checksum));
        // A kernel message inside a data line.
        let torn = f.replace(data, &format!("{}[  1.0] oops{}", &data[..20], &data[20..]));
        assert!(matches!(
            decode(torn.as_bytes(), LIMIT),
            Err(FrameError::Malformed(_))
        ));
        // Lines out of order, bad numbers, junk fields.
        for junk in [
            f.replace(&format!("{DATA}0 "), &format!("{DATA}1 ")),
            f.replace("len=", "len=x"),
            f.replace("exit=0", "exit=zero"),
            f.replace("lines=1", "lines=9"),
            f.replace("sha256=", "sha256=zz"),
            f.replace(" release=r", ""),
        ] {
            assert!(decode(junk.as_bytes(), LIMIT).is_err(), "{junk}");
        }
        // Invalid UTF-8 around the frame is only noise.
        let mut noisy = vec![0xff, 0xfe, b'\n'];
        noisy.extend_from_slice(f.as_bytes());
        assert!(decode(&noisy, LIMIT).is_ok());
    }

    #[test]
    fn oversized_answer_from_the_guest() {
        let f = encode_oversized(LIMIT + 1, 0, "r");
        assert_eq!(
            decode(&f, LIMIT),
            Err(FrameError::Oversized {
                len: LIMIT + 1,
                limit: LIMIT
            })
        );
        assert!(has_end(&f));
    }

    #[test]
    fn has_end_line() {
        let f = encode(b"x", 0, "r");
        assert!(has_end(&f));
        assert!(!has_end(&f[..f.len() - 80]));
    }
}
