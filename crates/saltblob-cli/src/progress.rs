//! Progress bars for transfers: shown on stderr only when it is a terminal, and only once a transfer has
//! taken more than a moment.

use std::io::IsTerminal;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::io::{AsyncRead, ReadBuf};

/// How long a transfer runs before its bar appears.
const DELAY: Duration = Duration::from_millis(700);

/// A progress bar that stays hidden for the first [`DELAY`] and when stderr is not a terminal. Clones count on the
/// same bar (the transfers of `cp` and `sync`, each with its clone).
#[derive(Clone)]
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    visible: bool,
    enabled: bool,
}

impl Progress {
    /// A bar for `total` bytes (a spinner with a byte count when unknown), labelled `label`.
    pub fn new(label: &str, total: Option<u64>, quiet: bool) -> Self {
        Self::styled(
            label,
            total,
            "{bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
            "{bytes} {binary_bytes_per_sec}",
            quiet,
        )
    }

    /// Counts items (`what`: "blobs", ...), labelled `label`: a bar to `total` when it is known, else a spinner.
    pub fn items(label: &str, what: &str, total: Option<u64>, quiet: bool) -> Self {
        Self::styled(
            label,
            total,
            &format!("{{human_pos}}/{{human_len}} {what} {{per_sec}} eta {{eta}}"),
            &format!("{{human_pos}} {what} {{per_sec}}"),
            quiet,
        )
    }

    /// A bar to `total` followed by `bar_figures` (an indicatif template), or, when `total` is unknown, a
    /// spinner followed by `spinner_figures`.
    fn styled(
        label: &str,
        total: Option<u64>,
        bar_figures: &str,
        spinner_figures: &str,
        quiet: bool,
    ) -> Self {
        let style = match total {
            Some(_) => ProgressStyle::with_template(&format!("{{msg}} [{{bar:30}}] {bar_figures}"))
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            None => ProgressStyle::with_template(&format!("{{msg}} {{spinner}} {spinner_figures}"))
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        };
        let bar =
            ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden()).with_style(style);
        bar.set_message(label.to_owned());
        Self {
            bar,
            started: Instant::now(),
            visible: false,
            enabled: !quiet && std::io::stderr().is_terminal(),
        }
    }

    /// Counts `n` more bytes (or items).
    pub fn add(&mut self, n: u64) {
        self.set(self.bar.position() + n);
    }

    /// Sets the count to `n`.
    pub fn set(&mut self, n: u64) {
        self.bar.set_position(n);
        if self.enabled && !self.visible && self.started.elapsed() > DELAY {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.visible = true;
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// An [`AsyncRead`] that reports the bytes read through it to a [`Progress`].
pub struct CountingReader<R> {
    pub inner: R,
    pub progress: Progress,
}

impl<R: AsyncRead + Unpin> AsyncRead for CountingReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.progress.add(n as u64);
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_counted_on_a_bar_to_a_known_total_else_on_a_spinner() {
        let bar = Progress::items("census", "blobs", Some(1000), true);
        assert_eq!(bar.bar.length(), Some(1000));
        let spinner = Progress::items("relayout", "blobs", None, true);
        assert_eq!(spinner.bar.length(), None);
    }
}
