use std::process::ExitCode;

use clap::Parser;
use ops::cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if ops::telemetry::logs_json() {
                tracing::error!("{error:#}");
            }
            eprintln!("settle: {error:#}");
            ExitCode::FAILURE
        }
    }
}
