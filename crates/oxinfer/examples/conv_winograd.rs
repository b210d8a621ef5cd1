//! One `3 × 3`, stride-1 convolution at Stable Diffusion shapes, direct (unfold + packed GEMM,
//! `conv2d_cpu_images_packed`) against Winograd F(4×4, 3×3) and F(2×2, 3×3)
//! (`conv2d_winograd_images`), run alternately. Prints, per shape and path, the best and median
//! wall time per call and the process's CPU seconds (user + system, from `/proc/self/stat`,
//! Linux) per call, the transformed weight's size, and the largest difference between each
//! Winograd result and the direct one relative to the output's largest value.
//!
//! ```text
//! cargo run --release -p oxinfer --example conv_winograd [reps] [images,h,w,cin,cout ...]
//! ```
//!
//! Default: 5 repetitions of 2 images of 32×32×320→320, 16×16×640→640, 16×16×1920→640 (the
//! F(4×4) levels), the 1280-channel level at 256 × 256 and 512 × 512 (4×4, 8×8 and 16×16
//! latents of 1280→1280 and 2560→1280; the up blocks' upsampler convolution at 32×32),
//! 64×64×128→128 and 128×128×256→256 (VAE).

use oxinfer::backend::cpu_ref::conv::{conv2d_cpu_images_packed, conv_geom};
use oxinfer::backend::cpu_ref::winograd::{conv2d_winograd_images, Variant, WinogradWeight};
use oxinfer_kernels::packed::float::PackedFloatMatrix;
use oxinfer_kernels::synthetic::random_values;
use oxinfer_kernels::{WeightFormat, WeightMatrix};
use std::time::Instant;

/// User + system CPU seconds of this process so far (`None` off Linux); clock ticks of 1/100 s.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesized command name: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Timings of one path: wall seconds per call, CPU seconds in all.
#[derive(Default)]
struct Times {
    wall: Vec<f64>,
    cpu: f64,
}

impl Times {
    fn run(&mut self, f: impl FnOnce()) {
        let (c0, t0) = (cpu_seconds(), Instant::now());
        f();
        self.wall.push(t0.elapsed().as_secs_f64());
        if let (Some(a), Some(b)) = (c0, cpu_seconds()) {
            self.cpu += b - a;
        }
    }

    fn line(&mut self, name: &str, gflop: f64) -> String {
        self.wall.sort_by(f64::total_cmp);
        let (best, median) = (self.wall[0], self.wall[self.wall.len() / 2]);
        format!(
            "  {name:8} best {:7.2} ms  median {:7.2} ms  cpu {:7.2} ms/call  ({:5.1} direct-GFLOP/s)",
            best * 1e3,
            median * 1e3,
            self.cpu / self.wall.len() as f64 * 1e3,
            gflop / best
        )
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reps: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(5);
    let mut shapes: Vec<[usize; 5]> = args
        .iter()
        .skip(1)
        .map(|a| {
            let v: Vec<usize> = a.split(',').map(|s| s.parse().expect("a number")).collect();
            v.try_into().expect("images,h,w,cin,cout")
        })
        .collect();
    if shapes.is_empty() {
        shapes = vec![
            [2, 32, 32, 320, 320],
            [2, 16, 16, 640, 640],
            [2, 16, 16, 1920, 640],
            [2, 4, 4, 1280, 1280],
            [2, 8, 8, 1280, 1280],
            [2, 8, 8, 2560, 1280],
            [2, 16, 16, 1280, 1280],
            [2, 16, 16, 2560, 1280],
            [2, 32, 32, 1280, 1280],
            [2, 64, 64, 128, 128],
            [2, 128, 128, 256, 256],
        ];
    }
    println!(
        "threads {}, {reps} calls per path, alternating",
        oxinfer_kernels::pool::pool_threads()
    );
    for [images, h, w, cin, cout] in shapes {
        let g = conv_geom(h, w, cin, 3, 1).expect("geometry");
        let x = random_values(images * h * w * cin, 1, 1.0);
        let wv = random_values(cout * 9 * cin, 2, 1.0);
        let bytes: Vec<u8> = wv.iter().flat_map(|v| (v * 0.05).to_le_bytes()).collect();
        let wm = WeightMatrix::new(WeightFormat::F32, &bytes, cout, 9 * cin).expect("weight");
        let packed = PackedFloatMatrix::pack(&wm).expect("f32 packs");
        let n_y = images * h * w * cout;
        let mut yd = vec![0f32; n_y];
        let mut direct = Times::default();
        // Per variant: weight, its transform time, output, timings.
        let mut wino: Vec<(&str, WinogradWeight, f64, Vec<f32>, Times)> =
            [("F(4x4)", Variant::F4x4), ("F(2x2)", Variant::F2x2)]
                .into_iter()
                .map(|(name, v)| {
                    let t0 = Instant::now();
                    let ww = WinogradWeight::new(&wm, cin, v).expect("winograd weight");
                    let ms = t0.elapsed().as_secs_f64() * 1e3;
                    (name, ww, ms, vec![0f32; n_y], Times::default())
                })
                .collect();
        // One call each first (pages touched, pool started), not timed.
        conv2d_cpu_images_packed(&x, images, &g, None, &packed, &mut yd).expect("direct");
        for (_, ww, _, yw, _) in &mut wino {
            conv2d_winograd_images(&x, images, &g, None, ww, yw).expect("winograd");
        }
        for _ in 0..reps {
            direct.run(|| {
                conv2d_cpu_images_packed(&x, images, &g, None, &packed, &mut yd).expect("direct")
            });
            for (_, ww, _, yw, times) in &mut wino {
                times.run(|| {
                    conv2d_winograd_images(&x, images, &g, None, ww, yw).expect("winograd")
                });
            }
        }
        let scale = yd.iter().fold(0f32, |m, v| m.max(v.abs()));
        let gflop = 2.0 * (images * h * w) as f64 * (9 * cin * cout) as f64 * 1e-9;
        println!(
            "{images} x {h}x{w}x{cin} -> {cout}: {gflop:.2} GFLOP direct, kernel {:.1} MB",
            packed.size_bytes() as f64 / 1e6,
        );
        println!("{}", direct.line("direct", gflop));
        for (name, ww, ms, yw, times) in &mut wino {
            let diff = yd
                .iter()
                .zip(yw.iter())
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            println!(
                "{}  weight {:.1} MB, transform {ms:.0} ms, rel diff {:.1e}",
                times.line(name, gflop),
                ww.size_bytes() as f64 / 1e6,
                diff / scale
            );
        }
    }
}
