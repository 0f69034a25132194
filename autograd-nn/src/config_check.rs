//! The checks every layer config's `try_init` runs on its numbers, with
//! one message shape: the config, the field, what it must be, what it got,
//! and the caller's line. A config that accepts a number its forward
//! cannot use fails later, far from the mistake (a zero `num_heads` used
//! to surface as "the packed projection did not split in three").

use autograd_core::Error;
use std::panic::Location;

/// The checks of one config, named in every message.
pub(crate) struct ConfigCheck {
    config: &'static str,
    loc: &'static Location<'static>,
}

impl ConfigCheck {
    #[track_caller]
    pub(crate) fn new(config: &'static str) -> Self {
        ConfigCheck { config, loc: Location::caller() }
    }

    fn fail(&self, field: &str, msg: String) -> Error {
        Error::InvalidShape { op: self.config, msg: format!("{field} {msg}"), location: Some(self.loc) }
    }

    /// A size the forward divides or splits by: at least 1.
    pub(crate) fn positive(&self, field: &str, v: usize) -> Result<(), Error> {
        if v == 0 { Err(self.fail(field, "must be greater than 0, got 0".into())) } else { Ok(()) }
    }

    /// `v` splits evenly into `by` parts (`by` checked positive first).
    pub(crate) fn divisible(&self, field: &str, v: usize, by_field: &str, by: usize) -> Result<(), Error> {
        self.positive(by_field, by)?;
        if !v.is_multiple_of(by) {
            return Err(self.fail(field, format!("({v}) must be divisible by {by_field} ({by})")));
        }
        Ok(())
    }

    /// A probability: in `[0, 1]` (NaN is not).
    pub(crate) fn probability(&self, field: &str, p: f64) -> Result<(), Error> {
        if (0.0..=1.0).contains(&p) { Ok(()) } else { Err(self.fail(field, format!("has to be between 0 and 1, but got {p}"))) }
    }

    /// An epsilon added under a square root: finite and not negative.
    pub(crate) fn epsilon(&self, field: &str, eps: f64) -> Result<(), Error> {
        if eps.is_finite() && eps >= 0.0 { Ok(()) } else { Err(self.fail(field, format!("must be a finite number >= 0, got {eps}"))) }
    }
}
