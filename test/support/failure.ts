// The KbtpError a call ended with, for tests of how calls fail; a call that succeeds, or fails
// with anything but a KbtpError, fails the test.
import * as assert from 'uvu/assert';
import { KbtpError } from '../../host/kbtp/errors.ts';

export async function failure(promise: Promise<unknown>): Promise<KbtpError> {
  try {
    await promise;
  } catch (error) {
    assert.instance(error, KbtpError, `not a KbtpError: ${String(error)}`);
    return error as KbtpError;
  }
  throw new Error('expected the call to fail');
}
