//! Generated blocks of the design documents: a benchmark that writes into a hand-written page
//! (e.g. `nam-bench sim --doc docs/netsim.md`) replaces only the text between two markers.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// The end marker of a generated block.
pub const END_MARK: &str = "<!-- END GENERATED -->";

/// The begin marker of the block `command` writes.
pub fn begin_mark(command: &str) -> String {
    format!("<!-- BEGIN GENERATED: {command} -->")
}

/// Replaces the text between the begin marker of `command` (or of `old_command`, the name
/// that wrote the block before the benchmarks moved to `nam-bench`; the marker is renamed)
/// and [`END_MARK`] in `doc` with `md`, its title dropped and its headings demoted one level.
pub fn replace_generated(doc: &Path, command: &str, old_command: &str, md: &str) -> Result<()> {
    let text = std::fs::read_to_string(doc).with_context(|| format!("reading {}", doc.display()))?;
    let begin = begin_mark(command);
    let found = text.find(&begin).map(|b| (b, begin.len())).or_else(|| {
        let old = begin_mark(old_command);
        text.find(&old).map(|b| (b, old.len()))
    });
    let (Some((b, _)), Some(e)) = (found, text.find(END_MARK)) else {
        bail!("{} has no `{begin}` ... `{END_MARK}` block", doc.display());
    };
    if e < b {
        bail!("{}: generated-block markers out of order", doc.display());
    }
    let body: String = md
        .lines()
        .skip_while(|l| l.starts_with("# ") || l.is_empty())
        .map(|l| if l.starts_with('#') { format!("#{l}\n") } else { format!("{l}\n") })
        .collect();
    let new = format!("{}{begin}\n{body}{}", &text[..b], &text[e..]);
    std::fs::write(doc, new).with_context(|| format!("writing {}", doc.display()))
}

/// This run's command as a report states it: `nam-bench` and the arguments it was given.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("nam-bench {}", args.join(" "))
}
