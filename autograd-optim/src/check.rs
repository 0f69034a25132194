//! Argument checks shared by the optimizer configs.

use autograd_core::{Error, Result};

pub(crate) fn non_negative(name: &str, v: f64) -> Result<()> {
    if v >= 0.0 { Ok(()) } else { Err(Error::msg(format!("invalid {name}: {v} (must be >= 0)"))) }
}
