// verify-signature.mjs PUBLIC_KEY.pem FILE FILE.sig: exit 0 when FILE.sig is a valid signature of
// FILE by the key (ed25519, as images/appliance/build.sh signs update manifests), 1 otherwise.
// Node does it: the image has no openssl binary, and Node's crypto is already in the root.
import { createPublicKey, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';

const [keyPath, filePath, signaturePath] = process.argv.slice(2);
try {
  const key = createPublicKey(readFileSync(keyPath));
  process.exit(verify(null, readFileSync(filePath), key, readFileSync(signaturePath)) ? 0 : 1);
} catch (error) {
  console.error(`verify-signature: ${error.message}`);
  process.exit(1);
}
