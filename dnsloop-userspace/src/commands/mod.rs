//! One module per subcommand: its arguments and its flow, from parsed arguments to exit code.
pub mod analyze;
pub mod capture;
pub mod doctor;
pub mod probe;
pub mod trace;
