//! What a training run ran on, for its metrics: reports and `pipe compare`
//! put runs side by side, and a speed-up means nothing without the CPU,
//! the GPUs and the libtorch build behind it.

use std::time::Instant;

use pipe_protocol::gpus::Gpu;
use serde_json::{json, Value};
use tch::{Device, Kind, Tensor};

/// The libtorch version this binary was built against (and, through its
/// rpath, links), as `train/build.rs` read it from that libtorch's files.
pub const LIBTORCH_VERSION: Option<&str> = option_env!("PIPE_LIBTORCH_VERSION");

/// `{"cpu", "cpus", "gpus", "libtorch"}`: the CPU model (null where
/// /proc/cpuinfo names none), the logical CPUs this process may run on,
/// the names of the CUDA devices among `devices` in their order (each null
/// where it cannot be found out), and the libtorch version.
pub fn describe(devices: &[Device]) -> Value {
    let cpus = std::thread::available_parallelism()
        .map(|count| count.get())
        .ok();
    json!({
        "cpu": cpu_model(),
        "cpus": cpus,
        "gpus": gpu_names(devices),
        "libtorch": LIBTORCH_VERSION,
    })
}

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    cpu_model_in(&text)
}

/// The first `model name` of a /proc/cpuinfo text (x86 has one per
/// logical CPU; most ARM kernels have none).
fn cpu_model_in(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let value = value.trim();
        (key.trim() == "model name" && !value.is_empty()).then(|| value.to_string())
    })
}

/// libtorch (through tch) tells how many CUDA devices there are but not
/// their names, so they come from `nvidia-smi` (`pipe_protocol::gpus`,
/// which narrows its list to CUDA_VISIBLE_DEVICES, set by the engine to
/// the GPUs it gave the stage): `cuda:N` is its Nth GPU. Null for a
/// device it cannot name (nvidia-smi missing, failing or silent).
fn gpu_names(devices: &[Device]) -> Vec<Option<String>> {
    let cuda: Vec<usize> = devices
        .iter()
        .filter_map(|device| match device {
            Device::Cuda(index) => Some(*index),
            _ => None,
        })
        .collect();
    if cuda.is_empty() {
        return Vec::new();
    }
    names_of(
        &cuda,
        &pipe_protocol::gpus::visible_gpus().unwrap_or_default(),
    )
}

/// The names of CUDA devices `cuda` (indices as libtorch numbers them)
/// among the `visible` GPUs, in CUDA's order.
fn names_of(cuda: &[usize], visible: &[Gpu]) -> Vec<Option<String>> {
    cuda.iter()
        .map(|&index| visible.get(index).map(|gpu| gpu.name.clone()))
        .collect()
}

/// Why libtorch sees no CUDA device, as far as can be told without it: a
/// CPU build of libtorch, no NVIDIA driver loaded, or a driver older than
/// the CUDA 13 builds of torch 2.11 need (R580).
pub fn why_no_cuda() -> String {
    if LIBTORCH_VERSION.is_some_and(|version| version.ends_with("+cpu")) {
        return format!(
            "this worker links a CPU-only libtorch ({}); build it against a CUDA one",
            LIBTORCH_VERSION.unwrap_or_default()
        );
    }
    match std::fs::read_to_string("/proc/driver/nvidia/version") {
        Err(_) => "no NVIDIA driver is loaded (/proc/driver/nvidia/version is absent)".to_string(),
        Ok(text) => match driver_major(&text) {
            Some(major) if major < CUDA13_DRIVER => format!(
                "the NVIDIA driver is R{major}, older than the R{CUDA13_DRIVER} that libtorch's CUDA 13 build needs; \
                 update the driver or use a libtorch built for an older CUDA"
            ),
            Some(major) => format!(
                "the NVIDIA driver (R{major}) is loaded but libtorch found no device: check CUDA_VISIBLE_DEVICES and nvidia-smi"
            ),
            None => "the NVIDIA driver's version could not be read: check nvidia-smi".to_string(),
        },
    }
}

/// The oldest driver branch CUDA 13 runs on.
const CUDA13_DRIVER: u32 = 580;

/// The driver's major version in /proc/driver/nvidia/version's first line
/// ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  ...").
fn driver_major(text: &str) -> Option<u32> {
    let line = text.lines().next()?;
    line.split_whitespace().find_map(|word| {
        let (major, rest) = word.split_once('.')?;
        (rest.chars().next()?.is_ascii_digit())
            .then_some(major)?
            .parse()
            .ok()
    })
}

/// The peak FLOP rate MFU divides by: per device, for the kind of the
/// matmuls (`Precision::compute_kind`), and where the figure came from.
#[derive(Debug, Clone)]
pub struct PeakFlops {
    pub per_device: f64,
    pub source: String,
}

/// The datasheet's dense (no sparsity) peak of a known GPU for `kind`
/// matmuls, by the name nvidia-smi gives: tensor cores for bf16 and fp16,
/// and for fp32 under `tf32`; the plain fp32 rate otherwise, which is what
/// libtorch runs fp32 matmuls at unless TF32 is asked for.
pub fn datasheet_peak(name: &str, kind: Kind, tf32: bool) -> Option<f64> {
    let name = name.to_ascii_uppercase();
    // (marker in the name, bf16/fp16, tf32, fp32), most specific first.
    const TABLE: &[(&str, f64, f64, f64)] = &[
        // The NVL (PCIe) parts run lower clocks than the SXM ones; their
        // datasheets give 1,671 (bf16) and 835 (TF32) TFLOP/s with
        // sparsity, half that dense.
        ("H200 NVL", 835.5e12, 417.5e12, 60.0e12),
        ("H100 NVL", 835.5e12, 417.5e12, 60.0e12),
        ("H200", 989.4e12, 494.7e12, 66.9e12),
        ("H100 PCIE", 756.0e12, 378.0e12, 51.2e12),
        ("H100", 989.4e12, 494.7e12, 66.9e12),
        ("A100", 312.0e12, 156.0e12, 19.5e12),
        ("L40S", 362.05e12, 183.0e12, 91.6e12),
        ("L4", 121.0e12, 60.0e12, 30.3e12),
        ("A10", 125.0e12, 62.5e12, 31.2e12),
    ];
    let (_, half, tensor_float, single) =
        TABLE.iter().find(|(marker, ..)| name.contains(marker))?;
    match kind {
        Kind::BFloat16 | Kind::Half => Some(*half),
        Kind::Float if tf32 => Some(*tensor_float),
        Kind::Float => Some(*single),
        _ => None,
    }
}

/// The peak of the first of `devices` (replicas use one kind of device):
/// a known GPU's datasheet figure, else the best rate of a square `kind`
/// matmul measured there (on the CPU with the stage's threads: a CPU's
/// datasheet depends on its vector units and clocks, which nothing here
/// reads reliably). The measurement takes a fraction of a second.
pub fn peak_flops(devices: &[Device], kind: Kind, tf32: bool, threads: usize) -> PeakFlops {
    let device = devices.first().copied().unwrap_or(Device::Cpu);
    if let Device::Cuda(_) = device {
        if let Some(Some(name)) = gpu_names(&[device]).first() {
            if let Some(peak) = datasheet_peak(name, kind, tf32) {
                let mode = if kind == Kind::Float && tf32 {
                    "TF32".to_string()
                } else {
                    format!("{kind:?}")
                };
                return PeakFlops {
                    per_device: peak,
                    source: format!("datasheet {name} ({mode}, dense)"),
                };
            }
        }
    }
    let size = if device == Device::Cpu { 1024 } else { 8192 };
    match measured_gemm(device, kind, [size, size, size]) {
        Ok(rate) => PeakFlops {
            per_device: rate,
            source: match device {
                Device::Cpu => format!(
                    "measured {size}x{size} {kind:?} matmul on {threads} thread{}",
                    if threads == 1 { "" } else { "s" }
                ),
                other => format!("measured {size}x{size} {kind:?} matmul on {other:?}"),
            },
        },
        Err(error) => PeakFlops {
            per_device: 0.0,
            source: format!("unknown: the matmul probe failed: {error}"),
        },
    }
}

/// Waits until `device` has finished its queued work (a no-op on the
/// CPU, whose ops finish before they return): what any timing of GPU work
/// needs first.
pub fn synchronize(device: Device) {
    if let Device::Cuda(index) = device {
        tch::Cuda::synchronize(index as i64);
    }
}

/// The best of a few timed `size`^3 matmuls, in FLOP/s.
/// What the CPU offers bf16 matmuls, from /proc/cpuinfo's flags (or the
/// file `PIPE_CPUINFO` names, which is how the tests stand in another CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuBf16 {
    /// AMX tiles (`amx_bf16`): Intel Xeon from Sapphire Rapids on.
    Amx,
    /// `avx512_bf16` without AMX: AMD from Zen 4 on, Intel Cooper Lake.
    Avx512Bf16,
    /// Neither: oneDNN converts to fp32 and back, bf16 is emulated.
    Emulated,
    /// Not an x86 /proc/cpuinfo (an ARM board, another OS).
    Unknown,
}

pub fn cpu_bf16() -> CpuBf16 {
    let path = std::env::var_os("PIPE_CPUINFO").unwrap_or_else(|| "/proc/cpuinfo".into());
    std::fs::read_to_string(path).map_or(CpuBf16::Unknown, |text| cpu_bf16_in(&text))
}

fn cpu_bf16_in(cpuinfo: &str) -> CpuBf16 {
    let Some(flags) = cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "flags").then_some(value)
    }) else {
        return CpuBf16::Unknown;
    };
    let has = |flag: &str| flags.split_whitespace().any(|each| each == flag);
    if has("amx_bf16") {
        CpuBf16::Amx
    } else if has("avx512_bf16") {
        CpuBf16::Avx512Bf16
    } else {
        CpuBf16::Emulated
    }
}

/// A note for the stage log when bf16 on this CPU will not pay: emulated
/// (no bf16 instruction at all), or a bf16 matmul measured at under 1.3x
/// fp32's speed, as on Xeons with AVX512-BF16 and no AMX. A bf16 run is
/// asked for to be faster; one that is not should say so before its
/// epoch, not leave the user to find it in the figures.
pub fn bf16_note(kind: Kind, device: Device) -> Option<String> {
    if kind != Kind::BFloat16 || device != Device::Cpu {
        return None;
    }
    let isa = cpu_bf16();
    // A MiniLM feed-forward matmul of a 32 x 32 batch: the shape decides
    // which kernels run, and at square 512 the ratio was 3.6x to 15x on
    // the EPYC where training ran 2.1x faster (docs/libtorch.md). About
    // 0.3 s, once per stage.
    let shape = [1024, 384, 1536];
    let ratio = match (
        measured_gemm(device, Kind::BFloat16, shape),
        measured_gemm(device, Kind::Float, shape),
    ) {
        (Ok(bf16), Ok(fp32)) if fp32 > 0.0 => Some(bf16 / fp32),
        _ => None,
    };
    bf16_note_for(isa, ratio)
}

fn bf16_note_for(isa: CpuBf16, ratio: Option<f64>) -> Option<String> {
    let measured = ratio
        .map(|ratio| {
            format!(
                "a bf16 matmul of the feed-forward's shape ran at {ratio:.2}x fp32's speed here"
            )
        })
        .unwrap_or_else(|| "the bf16 matmul probe failed".into());
    let advice = "bf16-mixed is faster where the CPU has AMX, and measured 2.0x fp32 on an \
                  AVX512-BF16 AMD EPYC; `precision: 32-true` gives the same accuracy \
                  (docs/libtorch.md, \"bf16 on a CPU\")";
    match isa {
        CpuBf16::Emulated => Some(format!(
            "note: this CPU has no bf16 instructions (AVX512-BF16 or AMX), so libtorch \
             emulates bf16 and will likely train slower than fp32 ({measured}); {advice}"
        )),
        _ if ratio.is_some_and(|ratio| ratio < 1.3) => Some(format!(
            "note: {measured}{}, so bf16 will train at about fp32's speed or slower; {advice}",
            match isa {
                CpuBf16::Avx512Bf16 => " (AVX512-BF16, no AMX)",
                CpuBf16::Amx => " (AMX)",
                _ => "",
            }
        )),
        _ => None,
    }
}

fn measured_gemm(device: Device, kind: Kind, [m, k, n]: [i64; 3]) -> Result<f64, tch::TchError> {
    tch::no_grad(|| {
        let a = Tensor::f_ones([m, k], (kind, device))?;
        let b = Tensor::f_ones([k, n], (kind, device))?;
        for _ in 0..2 {
            let _ = a.f_matmul(&b)?;
        }
        synchronize(device);
        // The best of several: a shared machine's neighbours only ever
        // slow a round down.
        let mut best = f64::INFINITY;
        for _ in 0..8 {
            let started = Instant::now();
            let _ = a.f_matmul(&b)?;
            synchronize(device);
            best = best.min(started.elapsed().as_secs_f64());
        }
        Ok(2.0 * (m * k * n) as f64 / best.max(1e-9))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipe_protocol::gpus::{narrow_to_visible, parse_listing};

    #[test]
    fn bf16_on_a_cpu_is_told_by_its_flags_and_a_slow_or_emulated_one_gets_a_note() {
        let flags = |flags: &str| format!("processor\t: 0\nflags\t\t: fpu sse2 {flags}\n");
        assert_eq!(
            cpu_bf16_in(&flags("avx512f amx_tile amx_bf16 avx512_bf16")),
            CpuBf16::Amx
        );
        assert_eq!(
            cpu_bf16_in(&flags("avx512f avx512_bf16")),
            CpuBf16::Avx512Bf16
        );
        assert_eq!(cpu_bf16_in(&flags("avx2 avx512f")), CpuBf16::Emulated);
        assert_eq!(cpu_bf16_in("Processor: ARMv8\n"), CpuBf16::Unknown);

        assert_eq!(bf16_note_for(CpuBf16::Avx512Bf16, Some(2.0)), None);
        assert_eq!(bf16_note_for(CpuBf16::Amx, Some(6.0)), None);
        let slow = bf16_note_for(CpuBf16::Avx512Bf16, Some(0.9)).unwrap();
        assert!(
            slow.contains("0.90x fp32's speed here (AVX512-BF16, no AMX)"),
            "{slow}"
        );
        let emulated = bf16_note_for(CpuBf16::Emulated, Some(2.5)).unwrap();
        assert!(emulated.contains("no bf16 instructions"), "{emulated}");
    }

    #[test]
    fn the_driver_version_is_read_off_the_kernel_modules_line() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan 22 2025\nGCC version: gcc 12.2.0\n";
        assert_eq!(driver_major(text), Some(570));
        assert_eq!(
            driver_major(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build"
            ),
            Some(580)
        );
        assert_eq!(driver_major("garbage"), None);
    }

    #[test]
    fn known_gpus_have_datasheet_peaks_per_precision() {
        assert_eq!(
            datasheet_peak("NVIDIA H200", Kind::BFloat16, false),
            Some(989.4e12)
        );
        assert_eq!(
            datasheet_peak("NVIDIA H200", Kind::Float, true),
            Some(494.7e12)
        );
        assert_eq!(
            datasheet_peak("NVIDIA H100 PCIe", Kind::BFloat16, false),
            Some(756.0e12)
        );
        assert_eq!(
            datasheet_peak("NVIDIA H200 NVL", Kind::BFloat16, false),
            Some(835.5e12)
        );
        assert_eq!(
            datasheet_peak("NVIDIA H100 NVL", Kind::Float, true),
            Some(417.5e12)
        );
        assert_eq!(
            datasheet_peak("NVIDIA H200 NVL", Kind::Float, false),
            Some(60.0e12)
        );
        assert_eq!(
            datasheet_peak("NVIDIA A100-SXM4-80GB", Kind::Float, false),
            Some(19.5e12)
        );
        assert_eq!(
            datasheet_peak("NVIDIA L40S", Kind::Half, false),
            Some(362.05e12)
        );
        assert_eq!(
            datasheet_peak("NVIDIA L4", Kind::BFloat16, false),
            Some(121.0e12)
        );
        assert_eq!(datasheet_peak("Tesla T4", Kind::BFloat16, false), None);
    }

    #[test]
    fn the_cpu_peak_is_a_measured_matmul_rate() {
        let peak = peak_flops(&[Device::Cpu], Kind::Float, false, 1);
        assert!(peak.per_device > 1e8, "{peak:?}");
        assert!(
            peak.source.starts_with("measured 1024x1024 Float matmul"),
            "{peak:?}"
        );
    }

    #[test]
    fn the_cpu_model_is_the_first_model_name_line() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n\
                   processor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(
            cpu_model_in(x86).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n";
        assert_eq!(cpu_model_in(arm), None);
        assert_eq!(cpu_model_in("model name\t:   \n"), None);
    }

    #[test]
    fn cuda_devices_are_named_in_the_order_cuda_visible_devices_gives() {
        let visible = narrow_to_visible(
            parse_listing(
                "0, GPU-aaa, NVIDIA A100\n1, GPU-bbb, NVIDIA H100\n2, GPU-ccc, NVIDIA H200\n",
            ),
            Some("2,GPU-aaa"),
        );
        let name = |text: &str| Some(text.to_string());
        // One device past the list has no name.
        assert_eq!(
            names_of(&[0, 1, 2], &visible),
            [name("NVIDIA H200"), name("NVIDIA A100"), None]
        );
        // nvidia-smi missing or silent: a null per device, never an error.
        assert_eq!(names_of(&[0, 1], &[]), [None, None]);
    }

    #[test]
    fn the_cpu_alone_has_no_gpu_names() {
        assert!(gpu_names(&[Device::Cpu, Device::Cpu]).is_empty());
        let described = describe(&[Device::Cpu]);
        assert_eq!(described["gpus"], json!([]));
        assert!(described["cpus"].as_u64().unwrap_or(0) >= 1, "{described}");
    }
}
