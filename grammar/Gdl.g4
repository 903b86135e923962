// The gdl grammar (docs/language.md). compiler/frontend/parse.cc turns the parse
// tree into the AST of ast.h; nothing else sees this grammar.
//
// Shape choices that keep the generated recursive-descent parser safe on
// hostile input (parse.cc also limits bracket nesting before parsing):
//   - binary operators are written as loops, one rule per precedence level,
//     so a long chain `a + b + c + ...` does not recurse;
//   - unary operators and `else if` chains are loops too; parse.cc nests them;
//   - the only recursion left goes through brackets and braces.
grammar Gdl;

// ------------------------------------------------------------------ program

program     : header item* EOF ;
header      : PROGRAM NAME SEMI ;
// Declarations and statements may interleave; each keeps its source order.
item        : declaration | statement ;

// ------------------------------------------------------------- declarations

declaration : dimDecl | constDecl | tensorDecl | fnDecl | groupDecl ;

// dim B in [1, 64] buckets(1, 8, 64) policy(update);
dimDecl     : DIM NAME IN LBRACK lo=expr COMMA hi=expr RBRACK dimClause* SEMI ;
dimClause   : BUCKETS LPAREN expr (COMMA expr)* RPAREN     # bucketsClause
            | POLICY LPAREN value=(BUCKETS | NAME) RPAREN  # policyClause
            ;

// group tp ranks(2);  (the ranks that run the program together; `ranks` is checked by parse.cc)
groupDecl   : GROUP NAME clause=NAME LPAREN expr RPAREN SEMI ;

// const H = 1024;
constDecl   : CONST NAME ASSIGN expr SEMI ;

// param W : f16[L, H, H];   scalar alpha : f32 = 1.0;   state cache : f16[S, D];
tensorDecl  : role=(PARAM | INPUT | OUTPUT | SCALAR | STATE) NAME COLON typeExpr (ASSIGN expr)? SEMI ;

// fn block(x: f16[B, H], w: f16[H, H]) -> f16[B, H] { ... }
fnDecl      : FN NAME LPAREN (fnParam (COMMA fnParam)*)? RPAREN (ARROW typeExpr)? block ;
fnParam     : NAME COLON typeExpr ;

// f16[B, H], or a bare dtype for rank 0.
typeExpr    : NAME (LBRACK expr (COMMA expr)* RBRACK)? ;

// --------------------------------------------------------------- statements

block       : LBRACE statement* RBRACE ;

statement   : letStmt
            | assignStmt
            | forStmt
            | ifStmt
            | whileStmt
            | returnStmt
            | exprStmt
            ;

letStmt     : LET NAME (COLON typeExpr)? ASSIGN expr SEMI ;
// x = v;  or  x[l, 0:4] = v;  (the region of a state or a let)
assignStmt  : NAME subscripts? ASSIGN expr SEMI ;
forStmt     : FOR NAME IN first=expr DOTDOT last=expr block ;
// `else if` is a loop here; parse.cc nests each one in the previous else.
ifStmt      : IF expr block elseIf* (ELSE block)? ;
elseIf      : ELSE IF expr block ;
whileStmt   : WHILE expr block ;
returnStmt  : RETURN expr SEMI ;
exprStmt    : expr SEMI ;

// -------------------------------------------------------------- expressions
// Loosest first: || , && , comparisons, |, ^, &, << >>, + -, * / // % @,
// unary - !, postfix. The bitwise operators bind tighter than comparisons,
// as in Python, so `x & 1 == 0` compares `x & 1` (in C it would not).

expr        : andExpr (ops+=OROR andExpr)* ;
andExpr     : cmpExpr (ops+=ANDAND cmpExpr)* ;
cmpExpr     : bitOrExpr (ops+=(LT | LE | GT | GE | EQ | NE) bitOrExpr)* ;
bitOrExpr   : bitXorExpr (ops+=PIPE bitXorExpr)* ;
bitXorExpr  : bitAndExpr (ops+=CARET bitAndExpr)* ;
bitAndExpr  : shiftExpr (ops+=AMP shiftExpr)* ;
shiftExpr   : addExpr (ops+=(SHL | SHR) addExpr)* ;
addExpr     : mulExpr (ops+=(PLUS | MINUS) mulExpr)* ;
mulExpr     : unaryExpr (ops+=(STAR | SLASH | SLASHSLASH | PERCENT | AT) unaryExpr)* ;
unaryExpr   : ops+=(MINUS | BANG)* postfixExpr ;
postfixExpr : primary subscripts* ;

// x[i], x[a:b, :], W[l]
subscripts  : LBRACK subscript (COMMA subscript)* RBRACK ;
// Labels avoid `start`/`stop`, which ParserRuleContext already uses.
subscript   : lo=expr (COLON hi=expr?)?
            | COLON hi=expr?
            ;

primary     : NAME LPAREN (arg (COMMA arg)*)? RPAREN    # callExpr
            | NAME                                      # nameExpr
            | INT                                       # intLit
            | FLOAT                                     # floatLit
            | (TRUE | FALSE)                            # boolLit
            | LPAREN expr RPAREN                        # parenExpr
            | LBRACK (expr (COMMA expr)*)? RBRACK       # listExpr
            ;

// Positional `x`, or keyword `eps = 1e-5`.
arg         : (keyword=NAME ASSIGN)? expr ;

// -------------------------------------------------------------------- lexer

PROGRAM : 'program' ;
DIM     : 'dim' ;
IN      : 'in' ;
BUCKETS : 'buckets' ;
POLICY  : 'policy' ;
CONST   : 'const' ;
GROUP   : 'group' ;
PARAM   : 'param' ;
INPUT   : 'input' ;
OUTPUT  : 'output' ;
SCALAR  : 'scalar' ;
STATE   : 'state' ;
FN      : 'fn' ;
LET     : 'let' ;
FOR     : 'for' ;
IF      : 'if' ;
ELSE    : 'else' ;
WHILE   : 'while' ;
RETURN  : 'return' ;
TRUE    : 'true' ;
FALSE   : 'false' ;

NAME    : [A-Za-z_] [A-Za-z0-9_]* ;
// A float needs a digit after its '.', so `0..L` lexes as 0 .. L.
FLOAT   : DIGITS '.' DIGITS EXPONENT?
        | DIGITS EXPONENT
        | '.' DIGITS EXPONENT?
        ;
INT     : DIGITS ;
fragment DIGITS   : [0-9]+ ;
fragment EXPONENT : [eE] [+-]? DIGITS ;

ARROW   : '->' ;
DOTDOT  : '..' ;
OROR    : '||' ;
ANDAND  : '&&' ;
SHL     : '<<' ;
SHR     : '>>' ;
LE      : '<=' ;
GE      : '>=' ;
EQ      : '==' ;
NE      : '!=' ;
LT      : '<' ;
GT      : '>' ;
ASSIGN  : '=' ;
PLUS    : '+' ;
MINUS   : '-' ;
STAR    : '*' ;
SLASHSLASH : '//' ;
SLASH   : '/' ;
PERCENT : '%' ;
AMP     : '&' ;
PIPE    : '|' ;
CARET   : '^' ;
AT      : '@' ;
BANG    : '!' ;
COLON   : ':' ;
SEMI    : ';' ;
COMMA   : ',' ;
LPAREN  : '(' ;
RPAREN  : ')' ;
LBRACK  : '[' ;
RBRACK  : ']' ;
LBRACE  : '{' ;
RBRACE  : '}' ;

// Only '#': '//' is floor division.
COMMENT : '#' ~[\r\n]* -> skip ;
SPACE   : [ \t\r\n]+ -> skip ;
// Anything else becomes a token of its own, so the parser reports it as a
// clean "unexpected character" error instead of the lexer printing one.
STRAY   : . ;
