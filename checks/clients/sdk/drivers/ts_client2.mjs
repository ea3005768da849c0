// @modelcontextprotocol/client 2.x (the v2 TypeScript client) with
// versionNegotiation { mode: 'auto' }: probes server/discover (2026-07-28)
// and falls back to initialize. Over stdio the probe runs in a short-lived
// sibling server process.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import * as c from './common.mjs';

const VERSION = c.packageVersion('@modelcontextprotocol/client');

await c.drive(
  'ts-client-v2',
  VERSION,
  { Stdio: StdioClientTransport, Http: StreamableHTTPClientTransport, v1: false },
  async (transport, rep) => {
    const client = new Client({ name: 'nsm-sdk-check', version: '1' }, { versionNegotiation: { mode: 'auto' } });
    await client.connect(transport);
    const protocol = client.getNegotiatedProtocolVersion() || null;
    rep.info(`negotiated: ${protocol} (era ${client.getProtocolEra()}, mode auto)`);
    return { client, protocol };
  },
);
