//! The request plan: the mix parsed from `--request`, and the schedule drawn from it with
//! `--seed`: request i due at i / rate, warm-up first.

use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::Args;

/// One kind of request of the mix.
#[derive(Debug, Clone)]
pub struct Template {
    weight: u64,
    method: hyper::Method,
    path: String,
    body: String,
}

pub fn parse_template(text: &str) -> Result<Template> {
    let mut parts = text.splitn(4, ':');
    let (weight, method, path) = match (parts.next(), parts.next(), parts.next()) {
        (Some(w), Some(m), Some(p)) => (w, m, p),
        _ => bail!(
            "`--request {text}`: expected WEIGHT:METHOD:PATH[:BODY], e.g. `3:GET:/session/{{key}}`"
        ),
    };
    let weight: u64 = weight.parse().ok().filter(|w| *w > 0).with_context(|| {
        format!("`--request {text}`: the weight `{weight}` is not a whole number above 0")
    })?;
    let method = hyper::Method::from_bytes(method.as_bytes())
        .with_context(|| format!("`--request {text}`: `{method}` is not an HTTP method"))?;
    if !path.starts_with('/') {
        bail!("`--request {text}`: the path `{path}` must start with `/`");
    }
    Ok(Template {
        weight,
        method,
        path: path.to_string(),
        body: parts.next().unwrap_or("").to_string(),
    })
}

/// A small seeded generator (SplitMix64): the same seed, the same requests.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One scheduled request.
#[derive(Clone)]
pub struct Planned {
    /// When it is due, from the start.
    pub due: Duration,
    /// Recorded (not a warm-up request).
    pub recorded: bool,
    pub method: hyper::Method,
    pub path: String,
    pub body: String,
}

pub fn plan(args: &Args, templates: &[Template]) -> Vec<Planned> {
    let total_weight: u64 = templates.iter().map(|t| t.weight).sum();
    let mut rng = SplitMix64(args.seed);
    let warm = (args.warmup * args.rate).round() as u64;
    let measured = (args.duration * args.rate).round() as u64;
    (0..warm + measured)
        .map(|i| {
            let mut pick = rng.below(total_weight);
            let t = templates
                .iter()
                .find(|t| {
                    if pick < t.weight {
                        true
                    } else {
                        pick -= t.weight;
                        false
                    }
                })
                .expect("the pick is below the total weight");
            let key = rng.below(args.keys.max(1)).to_string();
            Planned {
                due: Duration::from_secs_f64(i as f64 / args.rate),
                recorded: i >= warm,
                method: t.method.clone(),
                path: t.path.replace("{key}", &key),
                body: t.body.replace("{key}", &key),
            }
        })
        .collect()
}
