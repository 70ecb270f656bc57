//! The NVRTC options a client may pass. Compiler input is untrusted, so this is an allowlist:
//! options that read or write files (`-I`, `--pre-include`, `--time`, PCH, dumps), and the target
//! (which has its own field and is part of the key in canonical form) are refused.

/// Options allowed exactly as written.
const EXACT: &[&str] = &[
    "-G",
    "--device-debug",
    "-lineinfo",
    "--generate-line-info",
    "-use_fast_math",
    "--use_fast_math",
    "-ewp",
    "--extensible-whole-program",
    "-rdc=true",
    "-rdc=false",
    "--relocatable-device-code=true",
    "--relocatable-device-code=false",
    "-dw",
    "--disable-warnings",
    "-w",
    "-restrict",
    "--restrict",
    "-default-device",
    "--device-as-default-execution-space",
    "-extra-device-vectorization",
    "--extra-device-vectorization",
    "-dopt=on",
    "-dopt=off",
    "--dopt=on",
    "--dopt=off",
    "-Werror=all-warnings",
    "--Wreorder",
    "-Wreorder",
    "--Wno-deprecated-declarations",
    "-err-no",
    "--display-error-number",
    "-no-err-no",
    "--no-display-error-number",
    "-split-compile=0",
];

/// Options allowed with a value after this prefix. The value is checked by [`value_ok`].
const PREFIXED: &[&str] = &[
    "-D",
    "--define-macro=",
    "-U",
    "--undefine-macro=",
    "-std=",
    "--std=",
    "-ftz=",
    "--ftz=",
    "-prec-div=",
    "--prec-div=",
    "-prec-sqrt=",
    "--prec-sqrt=",
    "-fmad=",
    "--fmad=",
    "-maxrregcount=",
    "--maxrregcount=",
    "-diag-suppress=",
    "--diag-suppress=",
    "-diag-error=",
    "--diag-error=",
    "-diag-warn=",
    "--diag-warn=",
    "-O",
    "--dlink-time-opt",
    "-Xptxas=",
    "--ptxas-options=",
];

/// ptxas options that are safe to forward (no file output, no paths): what NVRTC's `-Xptxas=`
/// may pass, and, with [`PTXAS_EXACT`]'s, what a PTX kernel may.
const PTXAS_OK: &[&str] = &[
    "-O0",
    "-O1",
    "-O2",
    "-O3",
    "-v",
    "--verbose",
    "-warn-spills",
    "--warn-on-spills",
    "-warn-lmem-usage",
    "--warn-on-local-memory-usage",
];

/// Why an option was refused; the caller names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionError {
    #[error("`{0}` sets the target: use the graph's target field")]
    Target(String),
    #[error("`{0}` is not allowed: headers must be sent by content, and the daemon reads no client path")]
    Path(String),
    /// Says what is allowed, so a user need not read the source to find the option they meant.
    #[error("`{0}` is not on the NVRTC option allowlist; allowed: {list}", list = nvrtc_allowed())]
    NotAllowed(String),
    #[error("`{0}` is not on the ptxas option allowlist; allowed: {list}", list = ptxas_allowed())]
    NotAllowedPtxas(String),
}

/// The NVRTC options a client may pass, in words: every exact option, then each prefix with
/// the values it takes. The README's list is checked against this one.
pub fn nvrtc_allowed() -> String {
    let mut list: Vec<String> = EXACT.iter().map(|o| (*o).to_owned()).collect();
    list.extend(PREFIXED.iter().map(|p| format!("{p}{}", value_words(p))));
    list.join(" ")
}

/// The ptxas options a client may pass for a PTX kernel, in words.
pub fn ptxas_allowed() -> String {
    let mut list: Vec<String> = PTXAS_OK.iter().chain(PTXAS_EXACT).map(|o| (*o).to_owned()).collect();
    list.extend(PTXAS_VALUE.iter().map(|p| {
        let values = match *p {
            p if p.contains("maxrregcount") => "N",
            p if p.contains("opt-level") => "0..3",
            _ => "{ca,cg,cs,lu,cv,wb,wt}",
        };
        format!("{p}{values}")
    }));
    list.join(" ")
}

/// What [`value_ok`] takes after `prefix`, in words.
fn value_words(prefix: &str) -> &'static str {
    match prefix {
        "-O" => "{0,1,2,3}",
        "-std=" | "--std=" => "{c++03,c++11,c++14,c++17,c++20}",
        "-ftz=" | "--ftz=" | "-prec-div=" | "--prec-div=" | "-prec-sqrt=" | "--prec-sqrt=" | "-fmad=" | "--fmad=" => {
            "{true,false}"
        }
        "--dlink-time-opt" => "",
        "-maxrregcount=" | "--maxrregcount=" => "N",
        "-Xptxas=" | "--ptxas-options=" => "OPT[,OPT] (ptxas -O0..-O3, -v, spill and local-memory warnings)",
        "-diag-suppress=" | "--diag-suppress=" | "-diag-error=" | "--diag-error=" | "-diag-warn=" | "--diag-warn=" => {
            "N[,N]"
        }
        "-D" | "--define-macro=" => "NAME[=VALUE]",
        "-U" | "--undefine-macro=" => "NAME",
        _ => "VALUE",
    }
}

/// Checks one option.
pub fn check(option: &str) -> Result<(), OptionError> {
    let refuse_target = ["-arch", "--gpu-architecture", "-code"];
    if refuse_target.iter().any(|p| option.starts_with(p)) {
        return Err(OptionError::Target(shown(option)));
    }
    let path_like = [
        "-I",
        "--include-path",
        "-include",
        "--pre-include",
        "--time",
        "-time",
        "--fdevice-time-trace",
        "-pch",
        "--pch",
        "-create-pch",
        "--create-pch",
        "-use-pch",
        "--use-pch",
        "-pch-dir",
        "--pch-dir",
        "--dump",
        "-optix-ir",
        "--optix-ir",
    ];
    if path_like.iter().any(|p| option.starts_with(p)) {
        return Err(OptionError::Path(shown(option)));
    }
    if EXACT.contains(&option) {
        return Ok(());
    }
    let prefixed = PREFIXED.iter().find_map(|p| option.strip_prefix(p).map(|v| (*p, v)));
    match prefixed {
        Some((prefix, value)) if value_ok(prefix, value) => Ok(()),
        _ => Err(OptionError::NotAllowed(shown(option))),
    }
}

fn value_ok(prefix: &str, value: &str) -> bool {
    let printable = !value.is_empty() && value.len() <= 4096 && value.chars().all(|c| !c.is_control());
    match prefix {
        "-O" => matches!(value, "0" | "1" | "2" | "3"),
        "-std=" | "--std=" => matches!(value, "c++03" | "c++11" | "c++14" | "c++17" | "c++20"),
        "-ftz=" | "--ftz=" | "-prec-div=" | "--prec-div=" | "-prec-sqrt=" | "--prec-sqrt=" | "-fmad=" | "--fmad=" => {
            matches!(value, "true" | "false")
        }
        "--dlink-time-opt" => value.is_empty(),
        "-maxrregcount=" | "--maxrregcount=" => value.parse::<u32>().is_ok_and(|n| n <= 255),
        "-Xptxas=" | "--ptxas-options=" => value.split(',').all(|o| PTXAS_OK.contains(&o)),
        "-diag-suppress=" | "--diag-suppress=" | "-diag-error=" | "--diag-error=" | "-diag-warn=" | "--diag-warn=" => {
            value
                .split(',')
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
        }
        _ => printable,
    }
}

/// ptxas options a client may pass for a PTX kernel. No output paths, no input files, and no
/// `--gpu-name` (the target has its own field).
pub fn check_ptxas(option: &str) -> Result<(), OptionError> {
    if option.starts_with("--gpu-name") || option.starts_with("-arch") {
        return Err(OptionError::Target(shown(option)));
    }
    let path_like =
        ["-o", "--output-file", "--input-as-string", "-ias", "--options-file", "-optf", "--compile-as-tools-patch"];
    if path_like.iter().any(|p| option.starts_with(p)) {
        return Err(OptionError::Path(shown(option)));
    }
    if PTXAS_OK.contains(&option) || PTXAS_EXACT.contains(&option) {
        return Ok(());
    }
    let value = PTXAS_VALUE.iter().find_map(|p| option.strip_prefix(p).map(|v| (*p, v)));
    let ok = match value {
        Some((p, v)) if p.contains("maxrregcount") => v.parse::<u32>().is_ok_and(|n| n <= 255),
        Some((p, v)) if p.contains("opt-level") => matches!(v, "0" | "1" | "2" | "3"),
        Some((_, v)) => matches!(v, "ca" | "cg" | "cs" | "lu" | "cv" | "wb" | "wt"),
        None => false,
    };
    if ok { Ok(()) } else { Err(OptionError::NotAllowedPtxas(shown(option))) }
}

/// ptxas options a PTX kernel may pass exactly as written, besides [`PTXAS_OK`]'s.
const PTXAS_EXACT: &[&str] = &[
    "-lineinfo",
    "--generate-line-info",
    "-g",
    "--device-debug",
    "--warn-on-double-precision-use",
    "-warn-double-usage",
    "--disable-optimizer-constants",
    "--allow-expensive-optimizations=true",
    "--allow-expensive-optimizations=false",
    "--fmad=true",
    "--fmad=false",
    "-c",
    "--compile-only",
];

/// ptxas options allowed with a value after this prefix.
const PTXAS_VALUE: &[&str] = &[
    "--maxrregcount=",
    "-maxrregcount=",
    "-dlcm=",
    "--def-load-cache=",
    "-dscm=",
    "--def-store-cache=",
    "--opt-level=",
];

/// An option as quoted back in an error: bounded, so a huge option cannot flood a log.
fn shown(option: &str) -> String {
    option.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_the_everyday_options() {
        for ok in [
            "--use_fast_math",
            "-DN=4",
            "-DFOO",
            "--std=c++17",
            "-lineinfo",
            "--fmad=false",
            "-maxrregcount=64",
            "-Xptxas=-v",
            "-O3",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn ptxas_options_follow_their_own_allowlist() {
        for ok in ["-O3", "-v", "--maxrregcount=64", "-dlcm=ca", "--warn-on-spills"] {
            assert_eq!(check_ptxas(ok), Ok(()), "{ok}");
        }
        assert!(matches!(check_ptxas("-o/tmp/x"), Err(OptionError::Path(_))));
        assert!(matches!(check_ptxas("--gpu-name=sm_80"), Err(OptionError::Target(_))));
        assert!(matches!(check_ptxas("--fancy"), Err(OptionError::NotAllowedPtxas(_))));
        let said = check_ptxas("--fancy").unwrap_err().to_string();
        assert!(said.contains("allowed: -O0") && said.contains("--opt-level=0..3"), "{said}");
    }

    #[test]
    fn refuses_paths_targets_and_the_unknown() {
        assert!(matches!(check("-I/etc"), Err(OptionError::Path(_))));
        assert!(matches!(check("--include-path=/x"), Err(OptionError::Path(_))));
        assert!(matches!(check("--pre-include=/etc/passwd"), Err(OptionError::Path(_))));
        assert!(matches!(check("--time=/tmp/t"), Err(OptionError::Path(_))));
        assert!(matches!(check("-arch=sm_80"), Err(OptionError::Target(_))));
        assert!(matches!(check("--gpu-architecture=compute_90"), Err(OptionError::Target(_))));
        for bad in ["--fancy", "-O9", "--std=c++99", "-maxrregcount=x", "-Xptxas=-o/tmp/x", "-D", ""] {
            assert!(matches!(check(bad), Err(OptionError::NotAllowed(_))), "{bad}");
        }
        let said = check("-O9").unwrap_err().to_string();
        assert!(
            said.contains("allowed: -G ") && said.contains("-O{0,1,2,3}") && said.contains("-std={c++03"),
            "{said}"
        );
    }

    /// The README lists the allowlist for users; it must list every option the code takes.
    #[test]
    fn the_readme_lists_every_allowed_option() {
        let readme = include_str!("../../../../README.md");
        for option in EXACT.iter().chain(PREFIXED).chain(PTXAS_OK).chain(PTXAS_EXACT).chain(PTXAS_VALUE) {
            assert!(readme.contains(&format!("`{option}")), "README.md does not list `{option}`");
        }
    }
}
