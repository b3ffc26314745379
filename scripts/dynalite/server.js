// Starts dynalite, an in-memory DynamoDB, on 127.0.0.1 at the port given, tables active at
// once. Run by scripts/server-common.sh (start_dynalite) with NODE_PATH set to its install.
const dynalite = require('dynalite');

const port = Number(process.argv[2]);
const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
server.listen(port, '127.0.0.1', () => {
  console.log(`dynalite listening on 127.0.0.1:${port}`);
});
