//! A partial run (`--only`) written into the report an earlier full run wrote.
//!
//! Re-measuring one figure must not throw away the others, nor pass the new figure off as part of
//! the full run: each section measured now replaces its namesake, says when, at which commit and
//! under what load it was measured, and its rows replace the figure's rows in the targets table.
//! Every other section, and the Machine table of the run that measured them, stays as it was.

/// What a partial run says of itself at the top of each section it measured.
#[derive(Debug)]
pub struct Stamp<'a> {
    pub date: &'a str,
    pub commit: &'a str,
    pub only: &'a str,
    pub load_at_start: &'a str,
    pub load_at_end: &'a str,
}

impl Stamp<'_> {
    fn paragraph(&self) -> String {
        format!(
            "Measured on {} at commit {} by `kiln-bench --only {}` (load average {} at its start, {} at its end: \
             other work on the machine shows there); the rest of this file is from the run its Machine table describes, and this figure's rows in the \
             targets table are this run's.\n\n",
            self.date, self.commit, self.only, self.load_at_start, self.load_at_end
        )
    }
}

/// `report` with each of `sections` (markdown that starts with its `## ` heading) put in place of
/// the section of the same figure letter, stamped, and with `targets` (the targets table of this
/// run) replacing that figure's rows of the report's targets table; `gpu` (the GPU host's
/// section, which runs to the Reliability section) replaces the report's. A figure the report
/// does not hold yet is added before the GPU section.
pub fn merge(report: &str, sections: &[String], targets: &str, gpu: &str, stamp: &Stamp) -> String {
    let mut out = report.to_string();
    for section in sections {
        let heading = section.lines().next().unwrap_or_default();
        let stamped = match section.split_once("\n\n") {
            Some((head, body)) => format!("{head}\n\n{}{body}", stamp.paragraph()),
            None => format!("{section}\n\n{}", stamp.paragraph()),
        };
        out = replace_figure(&out, figure(heading), &stamped);
        out = replace_target_rows(&out, figure(heading), targets);
    }
    replace_gpu(&out, gpu)
}

/// A figure's letter as headings and the targets table name it: `(p)`.
fn figure(heading: &str) -> &str {
    let title = heading.trim_start_matches("## ");
    title.split(' ').next().unwrap_or(title)
}

fn replace_figure(report: &str, figure: &str, section: &str) -> String {
    let heading = format!("## {figure} ");
    let Some(start) = line_start(report, &heading) else {
        let at = line_start(report, "## GPU host").unwrap_or(report.len());
        return format!("{}{section}{}", &report[..at], &report[at..]);
    };
    let end = next_heading(report, start);
    format!("{}{section}{}", &report[..start], &report[end..])
}

/// The report's targets table with `figure`'s rows replaced by those of `targets`, where the
/// old ones stood (or after the table's last row).
fn replace_target_rows(report: &str, figure: &str, targets: &str) -> String {
    let prefix = format!("| {figure} |");
    let fresh: String = targets.lines().filter(|l| l.starts_with(&prefix)).map(|l| format!("{l}\n")).collect();
    let Some(table) = line_start(report, "## Targets") else { return report.to_string() };
    let end = next_heading(report, table);
    let mut out = String::with_capacity(report.len());
    let mut placed = false;
    let mut last_row = None;
    for line in report[table..end].split_inclusive('\n') {
        if line.starts_with(&prefix) {
            if !placed {
                out.push_str(&fresh);
                placed = true;
            }
            continue;
        }
        out.push_str(line);
        if line.starts_with('|') {
            last_row = Some(out.len());
        }
    }
    if !placed && let Some(at) = last_row {
        out.insert_str(at, &fresh);
    }
    format!("{}{out}{}", &report[..table], &report[end..])
}

/// The GPU host's section replaced by `gpu`: it runs to the Reliability section (its own copy of
/// tests/gpu/RESULTS.md holds `## ` headings of its own) or to the end.
fn replace_gpu(report: &str, gpu: &str) -> String {
    let gpu = gpu.trim_start_matches('\n');
    let Some(start) = line_start(report, "## GPU host") else { return report.to_string() };
    let end = line_start(&report[start..], "## Reliability").map_or(report.len(), |at| start + at);
    let mut body = gpu.to_string();
    if end < report.len() && !body.ends_with("\n\n") {
        body.push('\n');
    }
    format!("{}{body}{}", &report[..start], &report[end..])
}

/// Where the first line that starts with `prefix` begins.
fn line_start(text: &str, prefix: &str) -> Option<usize> {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with(prefix) {
            return Some(at);
        }
        at += line.len();
    }
    None
}

/// Where the next `## ` heading after the one at `start` begins, or the end.
fn next_heading(text: &str, start: usize) -> usize {
    let first = text[start..].find('\n').map_or(text.len(), |n| start + n + 1);
    line_start(&text[first..], "## ").map_or(text.len(), |at| first + at)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "# r\n\n## Machine\n\nold machine\n\n## Targets\n\n| figure | m |\n|---|---|\n\
        | (a) | a1 |\n| (p) | p1 |\n| (p) | p2 |\n| (q) | q1 |\n\n## (a) Warm\n\na body\n\n## (p) torch\n\nold p\n\n\
        ## (q) fleet\n\nq body\n\n## GPU host: x\n\nold gpu\n## Runs\n\nold runs\n\n## Reliability\n\nkept\n";

    fn stamp() -> Stamp<'static> {
        Stamp { date: "2026-12-06 23:00:00", commit: "abc", only: "p", load_at_start: "1", load_at_end: "2" }
    }

    #[test]
    fn a_partial_run_replaces_its_figure_its_rows_and_the_gpu_copy_and_keeps_the_rest() {
        let targets = "| figure | m |\n|---|---|\n| (p) | new p |\n";
        let gpu = "\n## GPU host: y\n\nnew gpu\n## Runs\n\nnew runs\n";
        let out = merge(REPORT, &["## (p) torch\n\nnew p body\n\n".into()], targets, gpu, &stamp());
        assert!(out.contains("old machine") && out.contains("a body") && out.contains("q body"), "{out}");
        assert!(out.contains("## (p) torch\n\nMeasured on 2026-12-06 23:00:00 at commit abc"), "{out}");
        assert!(out.contains("new p body") && !out.contains("old p"), "{out}");
        assert!(out.contains("| (a) | a1 |\n| (p) | new p |\n| (q) | q1 |\n"), "{out}");
        assert!(!out.contains("p1") && !out.contains("p2"), "{out}");
        assert!(out.contains("## GPU host: y\n\nnew gpu\n## Runs\n\nnew runs\n\n## Reliability\n\nkept\n"), "{out}");
        assert!(!out.contains("old gpu") && !out.contains("old runs"), "{out}");
    }

    #[test]
    fn a_figure_the_report_lacks_goes_before_the_gpu_section_and_its_rows_after_the_table() {
        let targets = "| figure | m |\n|---|---|\n| (r) | r1 |\n";
        let out = merge(REPORT, &["## (r) new\n\nr body\n\n".into()], targets, "## GPU host: x\n", &stamp());
        assert!(out.contains("q body\n\n## (r) new\n\nMeasured on"), "{out}");
        assert!(out.contains("| (q) | q1 |\n| (r) | r1 |\n\n## (a)"), "{out}");
    }
}
