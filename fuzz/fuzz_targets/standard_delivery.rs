#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    providers::fuzzing::run("standard_delivery", data);
});
