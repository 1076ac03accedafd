// Reads a helixpipe checkpoint's tokenizer with transformers.js (the JavaScript port of Hugging Face
// transformers and tokenizers; tools/hf_tokenizer_check.sh installs it) and checks that it is
// helixpipe's byte-level tokenizer (docs/formats/checkpoint.md): every text's ids are its UTF-8
// bytes, decoding gives the text back, nothing is added around it, and config.json reads as llama.
// usage: node tools/hf_tokenizer_check.mjs CHECKPOINT_DIR   (exit 0 when everything matches)
import path from 'node:path';
import { AutoConfig, AutoTokenizer, env } from '@huggingface/transformers';

const dir = path.resolve(process.argv[2] ?? '');
env.allowRemoteModels = false;
env.localModelPath = path.dirname(dir) + path.sep;
const name = path.basename(dir);

let all = '';
for (let c = 1; c < 0x250; ++c) all += String.fromCodePoint(c);  // ASCII, Latin-1, U+0100.. (2-byte)
const texts = ['', ' ', 'Hello, world!', ' leading and trailing spaces ', 'tabs\tand\nnewlines\r\n',
               'naïve café ☃ 日本語 🚀', all, ':help usr_01.txt  For Vim version 9.0.'];
const tok = await AutoTokenizer.from_pretrained(name);
let bad = 0;
for (const t of texts) {
  const want = [...Buffer.from(t, 'utf8')];
  for (const special of [false, true]) {
    const ids = tok.encode(t, { add_special_tokens: special });
    if (JSON.stringify(ids) !== JSON.stringify(want)) {
      ++bad;
      console.log(`ids differ for ${JSON.stringify(t.slice(0, 40))} (add_special_tokens=${special}):` +
                  ` got ${ids.length} ids ${JSON.stringify(ids.slice(0, 12))}..., want the ${want.length} bytes`);
    }
  }
  const back = want.length ? tok.decode(want) : '';  // transformers.js refuses to decode no ids
  if (back !== t) {
    ++bad;
    console.log(`decode of ${JSON.stringify(t.slice(0, 40))} gave ${JSON.stringify(back.slice(0, 40))}`);
  }
}
const cfg = await AutoConfig.from_pretrained(name);
if (cfg.model_type !== 'llama') {
  ++bad;
  console.log(`config.json: model_type ${cfg.model_type}, want llama`);
}
console.log(`${texts.length} texts (${texts.reduce((n, t) => n + Buffer.byteLength(t), 0)} bytes),` +
            ` vocab ${cfg.vocab_size}: ${bad === 0 ? 'all ids are the UTF-8 bytes and decode back' : bad + ' mismatches'}`);
process.exit(bad === 0 ? 0 : 1);
