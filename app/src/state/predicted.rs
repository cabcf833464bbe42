//! Predicted peaks drawn over the category chart: the doctor's what-if rows the user ticked.

use leptos::prelude::*;

/// One line: the change's key, its words, the predicted bytes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Line {
    pub(crate) key: String,
    pub(crate) label: String,
    pub(crate) bytes: u64,
}

#[derive(Clone, Copy)]
pub(crate) struct Predicted(RwSignal<Vec<Line>>);

impl Predicted {
    pub(crate) fn new() -> Predicted {
        Predicted(RwSignal::new(Vec::new()))
    }

    /// The lines (tracked).
    pub(crate) fn lines(self) -> Vec<Line> {
        self.0.get()
    }

    pub(crate) fn is_on(self, key: &str) -> bool {
        self.0.with(|l| l.iter().any(|x| x.key == key))
    }

    pub(crate) fn set(self, line: Line, on: bool) {
        self.0.update(|l| {
            l.retain(|x| x.key != line.key);
            if on {
                l.push(line);
            }
        });
    }

    /// Keeps the lines a new report still predicts, with its figures.
    pub(crate) fn refresh(self, now: &[Line]) {
        self.0.update(|l| {
            l.retain_mut(|x| match now.iter().find(|n| n.key == x.key) {
                Some(n) => {
                    *x = n.clone();
                    true
                }
                None => false,
            })
        });
    }

    pub(crate) fn clear(self) {
        self.0.set(Vec::new());
    }
}
