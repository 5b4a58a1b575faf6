//! `fault-holder`: one lease holder of the real-fault suite (see `leasehold_faults::holder`).
#![forbid(unsafe_code)]

use clap::Parser;

fn main() {
    let args = leasehold_faults::holder::HolderArgs::parse();
    std::process::exit(leasehold_faults::holder::run(args));
}
