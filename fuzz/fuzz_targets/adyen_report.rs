#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    providers::fuzzing::run("adyen_report", data);
});
