#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ingress::fuzzing::standard_signature_header(data);
});
