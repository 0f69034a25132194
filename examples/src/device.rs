//! `--device cpu|wgpu`: the backend an example runs on.
//!
//! The examples are generic over the backend; this picks the one named on
//! the command line. `wgpu` needs the examples built with the `wgpu`
//! feature (`cargo run --release --features wgpu --example digits --
//! --device wgpu`); without it the flag is an `Err` that says so.

use autograd::prelude::*;

/// A backend the examples can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// The CPU backend (the default).
    Cpu,
    /// The GPU backend on wgpu (Vulkan, Metal, DX12).
    Wgpu,
}

impl Device {
    /// The device named by `--device` in `args` (`cpu` when absent).
    ///
    /// ```
    /// use examples::device::Device;
    /// let args = ["digits", "--device", "wgpu"].map(String::from);
    /// assert_eq!(Device::from_args(&args).unwrap(), Device::Wgpu);
    /// assert_eq!(Device::from_args(&[]).unwrap(), Device::Cpu);
    /// assert!(Device::from_args(&["--device", "tpu"].map(String::from)).is_err());
    /// ```
    pub fn from_args(args: &[String]) -> Result<Device> {
        let Some(i) = args.iter().position(|a| a == "--device") else { return Ok(Device::Cpu) };
        match args.get(i + 1).map(String::as_str) {
            Some("cpu") => Ok(Device::Cpu),
            Some("wgpu") => Ok(Device::Wgpu),
            other => Err(Error::msg(format!("--device: expected cpu or wgpu, got {}", other.unwrap_or("nothing")))),
        }
    }
}

/// What an example runs, generic over the backend.
pub trait OnDevice {
    /// Its result.
    type Output;
    /// Runs on backend `B`.
    fn run<B: Backend>(self) -> Result<Self::Output>;
}

/// Runs `job` on `device`'s backend; `Err` for `wgpu` in a build without
/// the `wgpu` feature, or when no GPU adapter is found.
///
/// ```
/// use autograd::prelude::*;
/// use examples::device::{Device, OnDevice, run_on};
/// struct Name;
/// impl OnDevice for Name {
///     type Output = &'static str;
///     fn run<B: Backend>(self) -> Result<&'static str> { Ok(B::NAME) }
/// }
/// assert_eq!(run_on(Device::Cpu, Name).unwrap(), "cpu");
/// ```
pub fn run_on<J: OnDevice>(device: Device, job: J) -> Result<J::Output> {
    match device {
        Device::Cpu => job.run::<Cpu>(),
        #[cfg(feature = "wgpu")]
        Device::Wgpu => {
            use autograd::wgpu::Wgpu;
            <Wgpu as Backend>::available()?;
            job.run::<Wgpu>()
        }
        #[cfg(not(feature = "wgpu"))]
        Device::Wgpu => {
            Err(Error::msg("--device wgpu: these examples were built without the GPU backend; add --features wgpu to cargo run"))
        }
    }
}
