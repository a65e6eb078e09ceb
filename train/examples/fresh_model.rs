//! Writes a model directory of fresh weights for a config: what the GPU
//! check trains when no hub is at hand (a DistilBERT-base-sized model is
//! 268 MB of weights, too much to carry; the config and a seed are not).
//!
//!     fresh_model CONFIG_JSON TOKENIZER_JSON OUT_DIR [SEED]
//!
//! OUT_DIR gets config.json, model.safetensors (fp32, the encoder and a
//! 2-class head drawn from SEED, default 0) and tokenizer.json, the layout
//! `train/classifier@1` reads as its `model` input.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [config, tokenizer, out, rest @ ..] = args.as_slice() else {
        return Err("usage: fresh_model CONFIG_JSON TOKENIZER_JSON OUT_DIR [SEED]".into());
    };
    let seed: i64 = rest.first().map(|s| s.parse()).transpose()?.unwrap_or(0);
    let out = std::path::Path::new(out);
    std::fs::create_dir_all(out)?;
    tch::manual_seed(seed);
    let parsed = pipe_train::model::ModelConfig::from_file(std::path::Path::new(config))?;
    let model = pipe_train::model::SequenceClassifier::new(parsed, 2, tch::Device::Cpu)?;
    model.vs.save(out.join("model.safetensors"))?;
    std::fs::copy(config, out.join("config.json"))?;
    std::fs::copy(tokenizer, out.join("tokenizer.json"))?;
    Ok(())
}
