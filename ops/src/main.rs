use std::process::ExitCode;

use clap::Parser;
use ops::cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // A command whose output is cut short (`| head`) ends as any Unix tool does, on SIGPIPE;
    // a serving process keeps it ignored (a closed log pipe must not stop it).
    if !cli.command.serves() {
        sigpipe::reset();
    }
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
