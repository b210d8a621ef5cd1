//! The CPU reference of each backend op that is not a plain matmul: what the nn blocks fall back
//! to when no backend takes the op, and what [`super::check`] compares a device's result with.
//! It sits under `backend` (not `nn`) so that the backend module imports nothing from `nn`.

pub mod attention;
pub mod conv;
pub mod winograd;

#[cfg(test)]
mod test_rng;
