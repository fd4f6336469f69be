//! A progress bar per phase, on stderr, only when stderr is a terminal (and not `--quiet`).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One phase's bar; hidden when output is not a terminal.
pub(crate) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar counting `total` `unit`s.
    pub fn new(label: &str, total: u64, unit: &str, quiet: bool) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total), target(quiet)).with_style(
            ProgressStyle::with_template(&format!(
                "{{msg:<20}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{elapsed}} eta {{eta}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(label.to_owned());
        Self { bar }
    }

    /// A spinner counting operations, for a phase that runs for `seconds` (or until done).
    pub fn timed(label: &str, seconds: Option<f64>, quiet: bool) -> Self {
        let of = seconds.map_or(String::new(), |s| format!(" of {s:.0}s"));
        let bar = ProgressBar::with_draw_target(None, target(quiet)).with_style(
            ProgressStyle::with_template(&format!(
                "{{msg:<20}} {{spinner}} {{pos}} ops {{elapsed}}{of}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(label.to_owned());
        Self { bar }
    }

    /// Counts `n` more.
    pub fn inc(&mut self, n: u64) {
        self.bar.inc(n);
    }

    /// A handle for workers (counts into the same bar).
    pub fn handle(&self) -> ProgressBar {
        self.bar.clone()
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

fn target(quiet: bool) -> ProgressDrawTarget {
    if !quiet && std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}
