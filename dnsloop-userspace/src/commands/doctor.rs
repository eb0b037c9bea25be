//! `dnsloop doctor`: the node's DNS configuration, checked from its files.
use std::{path::PathBuf, process::ExitCode};

use clap::Args;
use dnsloop_core::{doctor, sink::OutputFormat};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Directory holding the node's root: /etc, /run, /proc/sys, /proc/net, /sys and
    /// /var/lib/kubelet are read below it, and absolute symlinks stay inside it.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// A Corefile, or a ConfigMap holding one (`kubectl get configmap -o yaml`), for CoreDNS
    /// or node-local-dns (repeatable). Read as given, not below --root.
    #[arg(long = "corefile", value_name = "FILE")]
    pub corefiles: Vec<PathBuf>,

    /// Output format on stdout.
    #[arg(long, value_parser = super::output_format(), default_value = "text")]
    pub output: OutputFormat,
}

impl DoctorArgs {
    pub fn config(&self) -> doctor::Config {
        doctor::Config {
            root: self.root.clone(),
            corefiles: self.corefiles.clone(),
            output: self.output,
        }
    }
}

/// Doctor has exit codes of its own: 1 for errors found on the node, 2 when it cannot run.
pub fn run(args: &DoctorArgs) -> ExitCode {
    let result = doctor::doctor(&args.config(), &mut std::io::stdout().lock());
    ExitCode::from(doctor::exit_status(&result))
}
