"""Random-weight FunASR model directories, built offline with funasr's own classes.

Model hubs are out of reach in tests and CI, so this module writes the files a
downloaded FunASR model directory holds (``config.yaml``, ``model.pt``,
``tokens.json``, ``am.mvn``, ``seg_dict``) for a model built from funasr's
registered classes with its default random initialisation. ``AutoModel(model=dir)``
then runs the real loading code (config merge, tokenizer, frontend, weight load).
The weights are random, so any transcription is meaningless text; the point is
running the real model code, e.g. to compare a device against the CPU.

Kinds (FunASR 1.4.16 class names, dimensions from the published models):

=============  ===========================================  =================================
kind           classes                                      ``size="real"`` matches
=============  ===========================================  =================================
paraformer     Paraformer + CifPredictorV2                  paraformer-large (offline)
bicif          BiCifParaformer + CifPredictorV3 (BiLSTM)    paraformer-large with timestamps
seaco          SeacoParaformer (+ LSTM hotword encoder)     paraformer-zh, ~247M parameters
vad            FsmnVADStreaming + FSMN                      fsmn-vad (same size either way)
punc           CTTransformer + SANMEncoder                  ct-punc (vocabulary reduced)
sensevoice     SenseVoiceSmall + SenseVoiceEncoderSmall     SenseVoiceSmall (CTC; sentencepiece
               (SANM, CTC head)                             vocabulary reduced)
paraformer-    ParaformerStreaming + SANMEncoderChunkOpt    paraformer-zh-streaming (chunked,
streaming      + CifPredictorV2                             with a cache)
campplus       CAMPPlus (FCM + CAM dense TDNN)              cam++ (speaker embeddings;
                                                            ``spk_model``)
whisper        WhisperWarp (openai-whisper's Whisper) +     Whisper-large-v3 through FunASR
               WhisperFrontend + WhisperTokenizer           (``size="real"``: tiny's widths)
emotion2vec    Emotion2vec (data2vec audio encoder, ALiBi)  emotion2vec_plus_base (9 emotion
               + a linear head over 9 emotion labels        labels)
nano           FunASRNano: SenseVoiceEncoderSmall +         Fun-ASR-Nano-2512's layout (no CTC
               Transformer adaptor + Qwen3 (transformers,   head; tiny widths either way; see
               ``AutoModelForCausalLM.from_config``)        docs/fun-asr-nano.md)
=============  ===========================================  =================================

``size="tiny"`` keeps the architecture and shrinks widths and depths so a
transcription takes well under a second.

Usage::

    from funasr_models import build
    model_dir = build("seaco")                     # cached under ~/.cache/dmlshim/funasr
    model = auto_model(model_dir, "cpu", ncpu=2)   # funasr.AutoModel, quiet
"""
import argparse
import copy
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torchvision_ops  # transformers imports torchvision (Nano's Qwen3): this repo's CI only

torchvision_ops.apply()

KINDS = ("paraformer", "bicif", "seaco", "vad", "punc", "sensevoice",
         "paraformer-streaming", "campplus", "whisper", "emotion2vec", "nano")
SIZES = ("tiny", "real")

# Transcripts of the bundled samples (examples/data), so their characters and
# words are in the vocabulary and hotwords made of them map to real token ids.
_DATA = Path(__file__).resolve().parent / "data"
_SPECIALS = ["<blank>", "<s>", "</s>"]  # ids 0, 1, 2 = blank_id, sos, eos of Paraformer
_VOCAB = {"tiny": 160, "real": 8404}  # paraformer-zh: 8404 tokens


def default_cache_dir():
    """``$DMLSHIM_CACHE/funasr``, else ``~/.cache/dmlshim/funasr``."""
    root = os.environ.get("DMLSHIM_CACHE") or Path.home() / ".cache" / "dmlshim"
    return Path(root) / "funasr"


def _sample_tokens():
    """Characters of the Mandarin sample and lower-case words of the English one."""
    tokens = []
    for name in ("zh.txt", "en.txt"):
        path = _DATA / name
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        if name == "zh.txt":
            tokens += [c for c in text if "\u4e00" <= c <= "\u9fff"]
        else:
            tokens += "".join(c if c.isalpha() else " " for c in text.lower()).split()
    return list(dict.fromkeys(tokens))  # de-duplicated, order kept


def _token_list(size):
    """Specials, sample tokens, CJK characters as filler, ``<unk>`` last: ``_VOCAB[size]`` tokens."""
    tokens = list(dict.fromkeys(_SPECIALS + _sample_tokens()))
    seen = set(tokens)
    code = 0x4E00
    while len(tokens) < _VOCAB[size] - 1:
        if chr(code) not in seen:
            tokens.append(chr(code))
        code += 1
    return tokens + ["<unk>"]


def _frontend(lfr_m, lfr_n, frontend="WavFrontend"):
    # dither 0.0: fbank without random noise, so CPU and device runs see equal input.
    return {"frontend": frontend,
            "frontend_conf": {"fs": 16000, "window": "hamming", "n_mels": 80,
                              "frame_length": 25, "frame_shift": 10,
                              "lfr_m": lfr_m, "lfr_n": lfr_n, "dither": 0.0}}


def _asr_config(kind, size, vocab_size):
    """config.yaml content for the Paraformer family (paraformer-zh's layout)."""
    tiny = size == "tiny"
    d = 32 if tiny else 512
    heads = 4
    encoder_conf = {
        "output_size": d, "attention_heads": heads, "linear_units": 64 if tiny else 2048,
        "num_blocks": 2 if tiny else 50, "dropout_rate": 0.1,
        "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.1,
        "input_layer": "pe", "pos_enc_class": "SinusoidalPositionEncoder",
        "normalize_before": True, "kernel_size": 11, "sanm_shfit": 0,
        "selfattention_layer_type": "sanm"}
    blocks = 2 if tiny else 16
    decoder_conf = {
        "attention_heads": heads, "linear_units": 64 if tiny else 2048, "num_blocks": blocks,
        "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
        "self_attention_dropout_rate": 0.1, "src_attention_dropout_rate": 0.1,
        "att_layer_num": blocks, "kernel_size": 11, "sanm_shfit": 0}
    predictor_conf = {"idim": d, "threshold": 1.0, "l_order": 1, "r_order": 1,
                      "tail_threshold": 0.45}
    if kind == "paraformer":
        model, predictor = "Paraformer", "CifPredictorV2"
    else:  # BiCif and SeACo: a second, 3x upsampled CIF head with a BiLSTM for timestamps
        model = "BiCifParaformer" if kind == "bicif" else "SeacoParaformer"
        predictor = "CifPredictorV3"
        predictor_conf.update({"smooth_factor2": 0.25, "noise_threshold2": 0.01,
                               "upsample_times": 3, "use_cif1_cnn": False,
                               "upsample_type": "cnn_blstm"})
    model_conf = {"ctc_weight": 0.0, "lsm_weight": 0.1, "length_normalized_loss": True,
                  "predictor_weight": 1.0, "predictor_bias": 1, "sampling_ratio": 0.75}
    conf = {"model": model, "model_conf": model_conf,
            "encoder": "SANMEncoder", "encoder_conf": encoder_conf,
            "decoder": "ParaformerSANMDecoder", "decoder_conf": decoder_conf,
            "predictor": predictor, "predictor_conf": predictor_conf,
            **_frontend(lfr_m=7, lfr_n=6),
            "tokenizer": "CharTokenizer",
            "tokenizer_conf": {"unk_symbol": "<unk>", "split_with_space": True}}
    if kind == "seaco":
        model_conf.update({"inner_dim": d, "bias_encoder_type": "lstm",
                           "bias_encoder_bid": False, "seaco_lsm_weight": 0.1,
                           "seaco_length_normalized_loss": True, "train_decoder": True,
                           # the hotword head's "no bias" class; paraformer-zh uses 8377
                           "NO_BIAS": vocab_size - 2 if tiny else 8377})
        conf["seaco_decoder"] = "ParaformerSANMDecoder"
        conf["seaco_decoder_conf"] = {
            "attention_heads": heads, "linear_units": 64 if tiny else 1024,
            "num_blocks": 1 if tiny else 4, "dropout_rate": 0.1,
            "positional_dropout_rate": 0.1, "self_attention_dropout_rate": 0.1,
            "src_attention_dropout_rate": 0.1, "kernel_size": 21, "sanm_shfit": 0,
            "use_output_layer": False, "wo_input_layer": True}
    return conf


def _vad_config():
    """fsmn-vad's config (its real size is already small: ~0.4M parameters)."""
    return {
        "model": "FsmnVADStreaming",
        "model_conf": {
            "sample_rate": 16000, "detect_mode": 1, "snr_mode": 0,
            "max_end_silence_time": 800, "max_start_silence_time": 3000,
            "do_start_point_detection": True, "do_end_point_detection": True,
            "window_size_ms": 200, "sil_to_speech_time_thres": 150,
            "speech_to_sil_time_thres": 150, "speech_2_noise_ratio": 1.0,
            "do_extend": 1, "lookback_time_start_point": 200,
            "lookahead_time_end_point": 100, "max_single_segment_time": 60000,
            "snr_thres": -100.0, "noise_frame_num_used_for_snr": 100,
            "decibel_thres": -100.0, "speech_noise_thres": 0.6,
            "fe_prior_thres": 0.0001, "silence_pdf_num": 1, "sil_pdf_ids": [0],
            "speech_noise_thresh_low": -0.1, "speech_noise_thresh_high": 0.3,
            "output_frame_probs": False, "frame_in_ms": 10, "frame_length_ms": 25},
        "encoder": "FSMN",
        "encoder_conf": {"input_dim": 400, "input_affine_dim": 140, "fsmn_layers": 4,
                         "linear_dim": 250, "proj_dim": 128, "lorder": 20, "rorder": 0,
                         "lstride": 1, "rstride": 0, "output_affine_dim": 140,
                         "output_dim": 248},
        **_frontend(lfr_m=5, lfr_n=1, frontend="WavFrontendOnline"),
    }


def _punc_config(size):
    """ct-punc's layout; the real model's 471067-word vocabulary is not reproduced."""
    tiny = size == "tiny"
    d = 32 if tiny else 256
    punc_list = ["<unk>", "_", "，", "。", "？", "、"]
    return {
        "model": "CTTransformer",
        "model_conf": {"ignore_id": 0, "embed_unit": d, "att_unit": d, "dropout_rate": 0.1,
                       "punc_list": punc_list, "punc_weight": [1.0] * len(punc_list),
                       "sentence_end_id": 3},
        "encoder": "SANMEncoder",
        "encoder_conf": {"input_size": d, "output_size": d, "attention_heads": 4 if tiny else 8,
                         "linear_units": 64 if tiny else 1024, "num_blocks": 1 if tiny else 4,
                         "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
                         "attention_dropout_rate": 0.0, "input_layer": "pe",
                         "pos_enc_class": "SinusoidalPositionEncoder", "normalize_before": True,
                         "kernel_size": 11, "sanm_shfit": 0, "selfattention_layer_type": "sanm",
                         "padding_idx": 0},
        "tokenizer": "CharTokenizer",
        "tokenizer_conf": {"unk_symbol": "<unk>"},
    }


def _streaming_config(size, vocab_size):
    """paraformer-zh-streaming's layout: chunked SANM encoder, online frontend."""
    conf = _asr_config("paraformer", size, vocab_size)
    conf["model"] = "ParaformerStreaming"
    conf["encoder"] = "SANMEncoderChunkOpt"
    conf["encoder_conf"].update({
        "input_layer": "pe_online", "chunk_size": [12, 15], "stride": [8, 10],
        "pad_left": [0, 0], "encoder_att_look_back_factor": [4, 4],
        "decoder_att_look_back_factor": [1, 1]})
    conf["decoder_conf"]["sanm_shfit"] = 5
    conf.update(_frontend(lfr_m=7, lfr_n=6, frontend="WavFrontendOnline"))
    return conf


def _sensevoice_config(size):
    """SenseVoiceSmall's layout: SANM encoder (+ time-pooling blocks), CTC head."""
    tiny = size == "tiny"
    return {
        "model": "SenseVoiceSmall",
        "model_conf": {"length_normalized_loss": True, "sos": 1, "eos": 2, "ignore_id": -1},
        "encoder": "SenseVoiceEncoderSmall",
        "encoder_conf": {"output_size": 32 if tiny else 512, "attention_heads": 4,
                         "linear_units": 64 if tiny else 2048, "num_blocks": 2 if tiny else 50,
                         "tp_blocks": 1 if tiny else 20, "dropout_rate": 0.1,
                         "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.1,
                         "input_layer": "pe", "pos_enc_class": "SinusoidalPositionEncoder",
                         "normalize_before": True, "kernel_size": 11, "sanm_shfit": 0,
                         "selfattention_layer_type": "sanm"},
        **_frontend(lfr_m=7, lfr_n=6),
        "tokenizer": "SentencepiecesTokenizer",
        "tokenizer_conf": {"bpemodel": "bpe.model", "unk_symbol": "<unk>",
                           "split_with_space": True},
    }


def _campplus_config():
    """cam++ (speech_campplus_sv_zh-cn_16k-common): 192-dim speaker embeddings, real size."""
    return {"model": "CAMPPlus",
            "model_conf": {"feat_dim": 80, "embedding_size": 192},
            "frontend": None}


def _whisper_config(size):
    """funasr.models.whisper: openai-whisper's model with FunASR's log-mel frontend.

    The multilingual tokenizer fixes the vocabulary (51865) and 30 s windows fix the
    audio context (1500 frames); the widths and depths shrink, and tiny's text context
    (64) caps a greedy decode at 32 tokens (whisper decodes up to n_text_ctx // 2).
    """
    tiny = size == "tiny"
    width, layers = (32, 1) if tiny else (384, 4)  # "real": whisper-tiny's dimensions
    dims = {"n_mels": 80, "n_vocab": 51865, "n_audio_ctx": 1500, "n_audio_state": width,
            "n_audio_head": 4 if tiny else 6, "n_audio_layer": layers,
            "n_text_ctx": 64 if tiny else 448,
            "n_text_state": width, "n_text_head": 4 if tiny else 6, "n_text_layer": layers}
    return {"model": "WhisperWarp", "model_conf": {"dims": dims},
            "frontend": "WhisperFrontend", "frontend_conf": {"n_mels": 80, "do_pad_trim": True},
            "tokenizer": "WhisperTokenizer",
            "tokenizer_conf": {"language": None, "task": "transcribe", "is_multilingual": True,
                               "num_languages": 99}}


# emotion2vec_plus's labels (tokens.json), in its order
_EMOTIONS = ["生气/angry", "厌恶/disgusted", "恐惧/fearful", "开心/happy", "中立/neutral",
             "其他/other", "难过/sad", "吃惊/surprised", "<unk>"]


def _emotion2vec_config(size):
    """emotion2vec_plus_base's layout (data2vec 2.0 audio encoder on the raw waveform);
    tiny: 32-wide convolutions and blocks, 2 layers; real: 512 / 768, 8 layers."""
    tiny = size == "tiny"
    conv, dim, depth, heads = (32, 32, 2, 4) if tiny else (512, 768, 8, 12)
    audio = {
        "type": "AUDIO", "prenet_depth": 1 if tiny else 4, "prenet_layerdrop": 0.0,
        "prenet_dropout": 0.0, "start_drop_path_rate": 0.0, "end_drop_path_rate": 0.0,
        "num_extra_tokens": 10, "init_extra_token_zero": True, "mask_noise_std": 0.01,
        "mask_prob_min": None, "mask_prob": 0.5, "inverse_mask": False,
        "mask_prob_adjust": 0.05, "keep_masked_pct": 0.0, "mask_length": 5,
        "add_masks": False, "remove_masks": False, "mask_dropout": 0.0,
        "encoder_zero_mask": True, "mask_channel_prob": 0.0, "mask_channel_length": 64,
        "ema_local_encoder": False, "local_grad_mult": 1.0, "use_alibi_encoder": True,
        "alibi_scale": 1.0, "learned_alibi": False, "alibi_max_pos": None,
        "learned_alibi_scale": True, "learned_alibi_scale_per_head": True,
        "learned_alibi_scale_per_layer": False, "num_alibi_heads": heads,
        "model_depth": depth, "decoder": None, "extractor_mode": "layer_norm",
        "feature_encoder_spec": f"[({conv}, 10, 5)] + [({conv}, 3, 2)] * 4 + [({conv},2,2)]"
                                f" + [({conv},2,2)]",
        "conv_pos_width": 95, "conv_pos_groups": heads, "conv_pos_depth": 1 if tiny else 5,
        "conv_pos_pre_ln": False}
    model_conf = {
        "loss_beta": 0.0, "loss_scale": None, "depth": depth, "start_drop_path_rate": 0.0,
        "end_drop_path_rate": 0.0, "num_heads": heads, "norm_eps": 1e-05,
        "norm_affine": True, "encoder_dropout": 0.1, "post_mlp_drop": 0.1,
        "attention_dropout": 0.1, "activation_dropout": 0.0, "dropout_input": 0.0,
        "layerdrop": 0.0, "embed_dim": dim, "mlp_ratio": 4.0, "layer_norm_first": False,
        "average_top_k_layers": depth, "end_of_block_targets": False, "clone_batch": 1,
        "layer_norm_target_layer": False, "batch_norm_target_layer": False,
        "instance_norm_target_layer": True, "instance_norm_targets": False,
        "layer_norm_targets": False, "ema_decay": 0.999, "ema_same_dtype": True,
        "log_norms": True, "ema_end_decay": 0.99999, "ema_anneal_end_step": 20000,
        "ema_encoder_only": False, "max_update": 100000, "extractor_mode": "layer_norm",
        "shared_decoder": None, "min_target_var": 0.1, "min_pred_var": 0.01,
        "supported_modality": "AUDIO", "mae_init": False, "seed": 1, "skip_ema": False,
        "cls_loss": 1.0, "recon_loss": 0.0, "d2v_loss": 1.0, "decoder_group": False,
        "adversarial_training": False, "adversarial_hidden_dim": 128,
        "adversarial_weight": 0.1, "cls_type": "chunk", "normalize": True,
        "project_dim": None, "modalities": {"audio": audio}}
    return {"model": "Emotion2vec", "model_conf": model_conf, "frontend": None,
            "tokenizer": "CharTokenizer", "tokenizer_conf": {"unk_symbol": "<unk>"}}


# Fun-ASR-Nano's LLM directory (Qwen3 config + tokenizer), named as in the published model
NANO_LLM_DIR = "Qwen3-0.6B"
# Qwen's chat tokens; Nano's prompt is ChatML and generation stops at <|im_end|>
_QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Nano's prompt (get_prompt, generate_chatml): trained into the tokenizer so it encodes short
_NANO_PROMPT = ("system\nYou are a helpful assistant.\nuser\n语音转写：\nassistant\n"
                "请结合上下文信息，更加准确地完成语音转写任务。热词列表语音转写成，不进行文本规整")


def _nano_config(size, model_dir):
    """Fun-ASR-Nano-2512's config.yaml layout with tiny widths (``size`` is ignored: a
    0.6B Qwen3 is not built here); ``model_dir``: the final directory, because Nano's
    ``init_param_path``s are absolute paths (funasr resolves nothing against the model)."""
    llm_dir = str(Path(model_dir).resolve() / NANO_LLM_DIR) if model_dir else NANO_LLM_DIR
    encoder = _sensevoice_config("tiny")["encoder_conf"]
    return {
        "model": "FunASRNano",
        "model_conf": {"lsm_weight": 0.1, "length_normalized_loss": True},
        "audio_encoder": "SenseVoiceEncoderSmall",
        "audio_encoder_conf": {**encoder, "freeze": True},
        "audio_adaptor": "Transformer",
        "audio_adaptor_conf": {"downsample_rate": 1, "use_low_frame_rate": False,
                               "ffn_dim": 64, "llm_dim": 32, "encoder_dim": encoder["output_size"],
                               "n_layer": 1, "attention_heads": 4, "freeze": True},
        "llm": "Qwen3-0.6b",
        "llm_conf": {"hub": "hf", "freeze": True, "llm_dtype": "fp32",
                     "init_param_path": llm_dir, "use_lora": False},
        **_frontend(lfr_m=7, lfr_n=6),
        "tokenizer": "HuggingfaceTokenizer",
        "tokenizer_conf": {"init_param_path": llm_dir},
        # a random LLM rarely emits <|im_end|>: cap the decode (Nano's default is 512 tokens)
        "max_length": 24,
    }


# The tiny Qwen3: Qwen3-0.6B's shape (GQA, head_dim, RMSNorm, RoPE) at width 32. Wide
# random weights, untied head: the greedy decode then depends on the audio.
_QWEN3 = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
          "max_position_embeddings": 2048, "tie_word_embeddings": False,
          "initializer_range": 0.5}


_NANO_FILES = 2   # version of the LLM files _write_qwen3 writes: part of the cache key


def _write_qwen3(llm_dir, seed):
    """A byte-level BPE tokenizer trained offline and a tiny ``Qwen3Config`` in ``llm_dir``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=_QWEN_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    text = [_NANO_PROMPT] + [(_DATA / n).read_text(encoding="utf-8") for n in ("zh.txt", "en.txt")
                             if (_DATA / n).exists()]
    tok.train_from_iterator(text * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", bos_token=None)
    fast.save_pretrained(str(llm_dir))
    # transformers 5 names its class TokenizersBackend, unknown to 4.x; both load this one,
    # so a directory built on one torch lane (cache shared) loads on the other
    config_path = Path(llm_dir) / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config_path.write_text(json.dumps(dict(config, tokenizer_class="PreTrainedTokenizerFast"),
                                      indent=2, ensure_ascii=False), encoding="utf-8")
    ids = {t: tok.token_to_id(t) for t in _QWEN_SPECIALS}
    Qwen3Config(vocab_size=tok.get_vocab_size(), bos_token_id=ids["<|endoftext|>"],
                eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
                **_QWEN3).save_pretrained(str(llm_dir))


# SenseVoice's task tags: the decoder emits language, emotion, event and text-norm
# tags first (inference() drops the first four tokens when aligning timestamps).
_SENSEVOICE_TAGS = ["<|zh|>", "<|en|>", "<|NEUTRAL|>", "<|HAPPY|>", "<|Speech|>",
                    "<|BGM|>", "<|woitn|>", "<|withitn|>"]


def _write_bpe_model(path, tokens, size):
    """A sentencepiece model (``bpe.model``) over the sample tokens, trained offline."""
    import io

    import sentencepiece as spm

    words = [t for t in tokens if not t.startswith("<")]
    lines = [" ".join(words[i:i + 8]) for i in range(0, len(words), 8)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 4), model_writer=model, model_type="char",
        vocab_size=len(set("".join(words))) + len(_SENSEVOICE_TAGS) + 4,
        user_defined_symbols=_SENSEVOICE_TAGS, character_coverage=1.0,
        bos_id=1, eos_id=2, unk_id=3, pad_id=-1, minloglevel=2, hard_vocab_limit=False)
    Path(path).write_bytes(model.getvalue())


def _am_mvn(dim):
    """Kaldi nnet text that funasr's ``load_cmvn`` reads: feats = (fbank + shift) * scale.

    funasr's fbank of int16-scaled speech has a mean of about 15 and a std of about 5
    (the bundled samples: 14.6 and 5.4), so shift -15 and scale 0.2 give the encoder
    inputs of order one, as a real am.mvn does.
    """
    def row(value):
        return "<LearnRateCoef> 0 [ " + " ".join([value] * dim) + " ]"
    return "\n".join(["<Nnet>", f"<Splice> {dim} {dim}", "[ 0 ]",
                      f"<AddShift> {dim} {dim}", row("-15.0"),
                      f"<Rescale> {dim} {dim}", row("0.2"), "</Nnet>", ""])


def model_config(kind, size="tiny", model_dir=None):
    """``(config, tokens, feature_dim)`` for a kind; ``feature_dim`` sizes am.mvn (None: no am.mvn).

    ``model_dir``: where the directory will live ("nano" writes absolute paths to it).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}; allowed: {', '.join(KINDS)}")
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; allowed: {', '.join(SIZES)}")
    if kind == "vad":
        return _vad_config(), None, 400  # 80 mel x lfr_m 5
    if kind == "punc":
        return _punc_config(size), _token_list("tiny"), None
    if kind == "campplus":
        return _campplus_config(), None, None
    if kind == "whisper":
        return _whisper_config(size), None, None
    if kind == "emotion2vec":
        return _emotion2vec_config(size), _EMOTIONS, None
    if kind == "nano":
        return _nano_config(size, model_dir), None, 560
    if kind == "sensevoice":  # tokens: what bpe.model is trained on
        return _sensevoice_config(size), _token_list("tiny"), 560
    tokens = _token_list(size)
    if kind == "paraformer-streaming":
        return _streaming_config(size, len(tokens)), tokens, 560
    return _asr_config(kind, size, len(tokens)), tokens, 560  # 80 mel x lfr_m 7


def _build_module(config, tokens, model_dir):
    """Instantiate the model the way ``AutoModel.build_model`` does (funasr's registry)."""
    from funasr.register import tables
    import funasr  # noqa: F401  (importing funasr fills the registry)

    kwargs = copy.deepcopy(config)
    kwargs["input_size"] = None
    if kwargs.get("frontend"):
        frontend_conf = dict(kwargs["frontend_conf"])
        if (model_dir / "am.mvn").exists():
            frontend_conf["cmvn_file"] = str(model_dir / "am.mvn")
        frontend = tables.frontend_classes.get(kwargs["frontend"])(**frontend_conf)
        kwargs["input_size"] = frontend.output_size()
    kwargs["vocab_size"] = len(tokens) if tokens else -1
    kwargs.pop("max_length", None)  # an inference option, not a model argument
    if (model_dir / "bpe.model").exists():
        import sentencepiece as spm
        kwargs["vocab_size"] = spm.SentencePieceProcessor(
            model_file=str(model_dir / "bpe.model")).get_piece_size()
    model_class = tables.model_classes.get(kwargs["model"])
    # as AutoModel.build_model: model_conf merged in, and kept (Emotion2vec reads it whole)
    return model_class(**{**kwargs.get("model_conf", {}), **kwargs})


# Parameters a library allocates with torch.empty and leaves for a checkpoint to fill
# (openai-whisper's text positions). Left so, they hold whatever memory held: the
# tiny Whisper's logits were NaN, its transcripts all "!" and, with the allocator's
# state, sometimes not the same on two devices. They get normal(0, 0.02) weights.
_UNINITIALISED = {"whisper": ("model.decoder.positional_embedding",)}


def _fill_uninitialised(model, kind):
    import torch

    for name in _UNINITIALISED.get(kind, ()):
        torch.nn.init.normal_(model.get_parameter(name), std=0.02)


def write_model_dir(model_dir, kind, size="tiny", seed=0, final_dir=None):
    """Write a complete model directory for ``kind`` into ``model_dir`` (created).

    ``final_dir``: where the directory will be moved to, for the absolute paths of
    "nano" (default ``model_dir``). Returns the number of parameters. Needs funasr
    and torch; ``size="real"`` for "seaco" takes a few seconds and about 3 GB of memory.
    """
    import torch
    import yaml

    model_dir = Path(model_dir)
    config, tokens, feat_dim = model_config(kind, size, final_dir or model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    if kind == "nano":  # the LLM's config and tokenizer
        _write_qwen3(model_dir / NANO_LLM_DIR, seed)
    with open(model_dir / "config.yaml", "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f, allow_unicode=True, sort_keys=False)
    if kind == "sensevoice":
        _write_bpe_model(model_dir / "bpe.model", tokens, size)
    elif tokens is not None:
        (model_dir / "tokens.json").write_text(
            json.dumps(tokens, ensure_ascii=False, indent=0), encoding="utf-8")
    if feat_dim is not None:
        (model_dir / "am.mvn").write_text(_am_mvn(feat_dim), encoding="utf-8")
    if kind == "seaco":
        # paraformer-zh ships a seg_dict; SeACo uses it to split hotwords into tokens.
        # Without one a hotword is looked up whole and becomes <unk>.
        words = [t for t in tokens if not t.startswith("<")]
        (model_dir / "seg_dict").write_text(
            "".join(f"{w} {' '.join(w) if w.isascii() else w}\n" for w in words),
            encoding="utf-8")
    # devices=[]: fork only the CPU generator (the weights are made on the CPU); torch
    # would otherwise also fork an accelerator's, and DirectML has no RNG state API.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # nano: built from the LLM files where they are now, before the move
        model = _build_module(_local_llm_paths(config, model_dir) if kind == "nano" else config,
                              tokens, model_dir)
        _fill_uninitialised(model, kind)
    torch.save(model.state_dict(), model_dir / "model.pt")
    return sum(p.numel() for p in model.parameters())


def _local_llm_paths(config, model_dir):
    """``config`` with Nano's LLM paths pointing into ``model_dir`` (built before the move)."""
    local = str(Path(model_dir).resolve() / NANO_LLM_DIR)
    return {**config, "llm_conf": {**config["llm_conf"], "init_param_path": local},
            "tokenizer_conf": {**config["tokenizer_conf"], "init_param_path": local}}


def build(kind, size="tiny", cache_dir=None, seed=0):
    """Path of a cached random-weight model directory for ``kind``; built on first use.

    ``kind``: one of KINDS; ``size``: "tiny" (tests) or "real" (published dimensions);
    ``cache_dir``: default ``default_cache_dir()``; ``seed``: torch seed of the weights.
    The directory name carries a hash of the config, so a changed recipe never
    reuses stale files; it is written to a temporary sibling and renamed, so an
    interrupted build leaves nothing half-written behind.
    Raises ValueError for an unknown kind or size.
    """
    config, tokens, _ = model_config(kind, size)   # paths of "nano" left out of the hash
    recipe = json.dumps([config, tokens, seed, _am_mvn(1), _UNINITIALISED.get(kind)] + ([_QWEN3, _NANO_FILES] if kind == "nano" else []),
                        ensure_ascii=False, sort_keys=True)
    digest = hashlib.sha1(recipe.encode("utf-8")).hexdigest()[:10]
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    model_dir = cache_dir / f"{kind}-{size}-{digest}"
    if (model_dir / "model.pt").exists():
        return model_dir
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=cache_dir))
    try:
        write_model_dir(tmp, kind, size, seed, final_dir=model_dir)
        try:
            tmp.rename(model_dir)
        except OSError:  # another process finished first: use its copy
            if not (model_dir / "model.pt").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model_dir


def auto_model(model_dir, device, ncpu, **kw):
    """``funasr.AutoModel`` for ``model_dir`` (a directory or hub name) on ``device``, quiet.

    ``ncpu``: torch CPU threads (AutoModel calls ``torch.set_num_threads``). No update
    check, progress bar or info logging; ``**kw`` goes to AutoModel and overrides
    these (e.g. ``vad_model=...``, ``disable_log=True`` in place of ``log_level``).
    """
    from funasr import AutoModel

    options = {"disable_update": True, "disable_pbar": True, "log_level": "ERROR", **kw}
    return AutoModel(model=str(model_dir), device=str(device), ncpu=ncpu, **options)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--size", choices=SIZES, default="tiny")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help=f"default: {default_cache_dir()}")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(build(args.kind, args.size, args.cache_dir, args.seed))


if __name__ == "__main__":
    main()
